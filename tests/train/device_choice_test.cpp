// Which device a training process takes (Note [One GPU per rank]), with the number of visible
// GPUs given: our launcher's ranks (--gpus), an outside launcher's (mpirun, srun) without
// --gpus, and single processes; bad combinations as one clear error.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "common/test_utils.h"
#include "train/device_choice.h"

namespace vitddp {
namespace {

using testing::throws_with;

RankEnvironment ranks(int rank, int local_rank, int world_size, const char* source = "OMPI") {
  RankEnvironment env;
  env.distributed = true;
  env.rank = rank;
  env.local_rank = local_rank;
  env.world_size = world_size;
  env.local_rank_set = true;
  env.source = source;
  return env;
}

std::string choose(const TrainConfig& c, const RankEnvironment& env, int visible, std::string* note = nullptr) {
  std::ostringstream log;
  const std::string d = choose_device(c, env, visible, [] { return std::string("0: GPU A; 1: GPU B"); }, log);
  if (note) *note = log.str();
  return d;
}

TEST(DeviceChoice, AnOutsideLaunchersRankTakesTheGpuOfItsLocalRank) {
  TrainConfig c;  // no --gpus, no --device: mpirun / srun
  EXPECT_EQ(choose(c, ranks(6, 2, 8), 4), "cuda:2");
  EXPECT_EQ(choose(c, ranks(4, 0, 8), 4), "cuda:0");
  c.device = "cuda";
  EXPECT_EQ(choose(c, ranks(5, 1, 8, "SLURM"), 2), "cuda:1");
}

TEST(DeviceChoice, ARankThatSeesOneGpuTakesIt) {
  TrainConfig c;  // srun --gpus-per-task=1: every rank sees its own GPU as device 0
  EXPECT_EQ(choose(c, ranks(3, 3, 4, "SLURM"), 1), "cuda:0");
}

TEST(DeviceChoice, MoreLocalRanksThanGpusIsAnError) {
  TrainConfig c;
  EXPECT_TRUE(throws_with([&] { choose(c, ranks(3, 3, 4), 2); },
                          {"local rank 3 (OMPI variables) has no GPU of its own", "shows 2 (0: GPU A; 1: GPU B)",
                           "one rank per GPU"}));
}

TEST(DeviceChoice, WithoutALocalRankEachRankTakesTheFirstGpu) {
  // RANK and WORLD_SIZE alone, as with one rank per machine: the rank is not a local rank.
  RankEnvironment env = ranks(3, 3, 4, "RANK");
  env.local_rank_set = false;
  TrainConfig c;
  EXPECT_EQ(choose(c, env, 2), "cuda:0");
  c.device = "cuda:1";
  EXPECT_EQ(choose(c, env, 2), "cuda:1");
}

TEST(DeviceChoice, ANamedDeviceIsTakenAsNamed) {
  TrainConfig c;
  c.device = "cuda:1";  // per rank (cuda:$LOCAL_RANK, an MPMD line per rank), or one for all: NCCL's to refuse
  EXPECT_EQ(choose(c, ranks(1, 1, 2), 2), "cuda:1");
  EXPECT_EQ(choose(c, ranks(0, 0, 2), 2), "cuda:1");
  c.gpus = 1;
  EXPECT_EQ(choose(c, ranks(0, 0, 2), 2), "cuda:1");
  c.gpus = 0;
  c.device = "cuda:2";
  EXPECT_TRUE(throws_with([&] { choose(c, ranks(1, 1, 2), 2); }, {"device cuda:2", "2 GPU(s) visible"}));
}

TEST(DeviceChoice, WithoutGpusTheRanksTrainOnTheCpu) {
  TrainConfig c;
  std::string note;
  EXPECT_EQ(choose(c, ranks(1, 1, 2), 0, &note), "cpu");
  EXPECT_NE(note.find("no GPU visible"), std::string::npos);
}

TEST(DeviceChoice, OurLaunchersRanksAndSingleProcesses) {
  TrainConfig c;
  c.gpus = 2;
  RankEnvironment launched = ranks(1, 1, 2, "RANK");
  EXPECT_EQ(choose(c, launched, 2), "cuda:1");
  c.gpus = 3;
  EXPECT_TRUE(throws_with([&] { choose(c, launched, 2); }, {"--gpus 3", "2 GPU(s) visible", "GPU A"}));
  c.gpus = 2;
  c.device = "cuda:0";
  EXPECT_TRUE(throws_with([&] { choose(c, launched, 2); }, {"--gpus 2", "--device cuda:0", "leave --device out"}));

  TrainConfig single;
  EXPECT_EQ(choose(single, RankEnvironment{}, 2), "cuda:0");
  EXPECT_EQ(choose(single, ranks(0, 0, 1), 2), "cuda:0");  // a rank environment of one rank
  single.device = "cuda";
  EXPECT_EQ(choose(single, RankEnvironment{}, 2), "cuda:0");
  single.device = "auto";
  std::string note;
  EXPECT_EQ(choose(single, RankEnvironment{}, 0, &note), "cpu");
  EXPECT_NE(note.find("vit_tiny"), std::string::npos);
  single.device = "cuda:5";
  EXPECT_TRUE(throws_with([&] { choose(single, RankEnvironment{}, 2); }, {"cuda:5", "2 GPU(s) visible"}));
  single.device = "cpu";
  EXPECT_EQ(choose(single, RankEnvironment{}, 2), "cpu");
}

TEST(DeviceChoice, CpuProcessesConflictWithAGpuDevice) {
  TrainConfig c;
  c.procs = 2;
  EXPECT_EQ(choose(c, ranks(1, 1, 2, "RANK"), 2), "cpu");
  c.device = "cuda:0";
  EXPECT_TRUE(throws_with([&] { choose(c, ranks(1, 1, 2, "RANK"), 2); }, {"--procs 2", "conflicts with --device cuda:0"}));
}

}  // namespace
}  // namespace vitddp
