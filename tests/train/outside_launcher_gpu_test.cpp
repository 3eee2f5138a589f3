// Ranks started by an outside launcher without --gpus (Note [One GPU per rank]): two `train`
// processes with mpirun's or srun's rank variables, as those launchers start them, train
// together on two GPUs. Before each rank took the GPU of its local rank, both took cuda:0 and
// NCCL refused them. Skipped without 2 GPUs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>

#include "common/ddp_harness.h"
#include "common/train_process.h"

namespace vitddp {
namespace {

const std::string kArgs = "--set timeout=30 --model vit_tiny --data gpu --batch-size 16 --steps 3 "
                          "--print-every 1 --json";

// Runs both ranks at once, env_of(rank) giving a rank's variables and `name` its rendezvous
// folder; both must finish, as one run of 2 ranks over NCCL whose rank 0 took cuda:0 and
// reported it (rank 1 reports nothing).
template <typename EnvOf>
void expect_two_ranks_train(const std::string& name, EnvOf&& env_of) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("vitddp_" + name + "_" +
                                                                              std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::string rendezvous = " NCCL_NVLS_ENABLE=0 VITDDP_RENDEZVOUS=" + dir.string();
  testing::TrainOutcome out[2];
  std::thread other([&] { out[1] = testing::run_train(env_of(1) + rendezvous, kArgs, true, 120); });
  out[0] = testing::run_train(env_of(0) + rendezvous, kArgs, true, 120);
  other.join();
  std::filesystem::remove_all(dir);
  EXPECT_EQ(out[0].code, 0) << out[0].out;
  EXPECT_EQ(out[1].code, 0) << out[1].out;
  const nlohmann::json j = out[0].json();
  EXPECT_EQ(j["world_size"], 2) << out[0].out;
  EXPECT_EQ(j["device"], "cuda:0") << out[0].out;
  ASSERT_TRUE(j["backend"].is_string()) << out[0].out;
  EXPECT_EQ(j["backend"].get<std::string>().rfind("nccl", 0), 0u) << out[0].out;  // nccl or nccl+host-copy
  EXPECT_EQ(j["losses"].size(), 3u) << out[0].out;
  EXPECT_TRUE(out[1].json().is_null()) << "only rank 0 reports:\n" << out[1].out;
}

TEST(OutsideLauncherGpu, MpirunRanksTakeTheGpusOfTheirLocalRanks) {
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  // Rank 1 on cuda:0 too would make NCCL refuse the pair: both finishing is the evidence that it
  // took cuda:1 (only rank 0 reports).
  expect_two_ranks_train("mpirun", [](int r) {
    const std::string n = std::to_string(r);
    return "OMPI_COMM_WORLD_RANK=" + n + " OMPI_COMM_WORLD_LOCAL_RANK=" + n + " OMPI_COMM_WORLD_SIZE=2";
  });
}

TEST(OutsideLauncherGpu, SrunRanksThatSeeOneGpuEachTakeIt) {
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  expect_two_ranks_train("srun", [](int r) {
    const std::string n = std::to_string(r);
    return "CUDA_VISIBLE_DEVICES=" + n + " SLURM_PROCID=" + n + " SLURM_LOCALID=" + n + " SLURM_NTASKS=2";
  });
}

}  // namespace
}  // namespace vitddp
