// Elastic restarts (--max-restarts, Note [Elastic restarts] in distributed/launcher.cpp): a rank
// killed mid-training makes the launchers restart every rank, which go on from the newest state
// all of them have (this node's memory checkpoints, else --checkpoint-dir) and end with the
// weights of a run that was never interrupted, bit for bit; --json says where the state came
// from. A budget that runs out ends the run with the first failure's code and line.
#include <gtest/gtest.h>

#include <array>
#include <future>
#include <string>

#include "common/multiprocess.h"
#include "common/run_checks.h"
#include "common/train_process.h"
#include "common/two_hosts.h"

namespace vitddp {
namespace {

using testing::TrainOutcome;

const std::string kRun =
    "--model vit_tiny --batch-size 4 --steps 8 --set workers=1 --print-every 0 --hook powersgd --powersgd-start-iter 1 "
    "--optimizer adamw --set timeout=20 --json";

// The uninterrupted run's weights, saved into `dir`/straight.safetensors.
std::string straight_weights(const testing::TempFolder& dir, const std::string& args) {
  TrainOutcome o = testing::run_train("", args + " --save " + dir.path() + "/straight.safetensors");
  EXPECT_EQ(o.code, 0) << o.out;
  return testing::file_bytes(dir.path() + "/straight.safetensors");
}

TEST(Restart, AKilledRankRestartsFromMemoryWithTheUninterruptedWeights) {
  testing::TempFolder dir("vitddp_restart");
  const std::string args = "--procs 2 " + kRun;
  const std::string straight = straight_weights(dir, args);
  TrainOutcome o = testing::run_train("VITDDP_FAULT=1:5:kill", args + " --max-restarts 1 --set memory-checkpoint-every=3 "
                                                               "--save " + dir.path() + "/restarted.safetensors");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("launcher: rank 1 was killed by signal 9"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("launcher: restarting the ranks (restart 1 of 1)"), std::string::npos) << o.out;
  const nlohmann::json j = o.json();
  EXPECT_EQ(j["recovery"]["restart"], 1) << o.out;
  EXPECT_EQ(j["recovery"]["restored_from"], "memory") << o.out;
  // Saved after step 3, its write done while steps 4 and 5 ran; killed in step 6.
  EXPECT_EQ(j["recovery"]["step"], 3) << o.out;
  EXPECT_GT(j["recovery"]["recovery_seconds"].get<double>(), 0) << o.out;
  EXPECT_EQ(j["first_step"], 4) << o.out;
  EXPECT_EQ(j["memory_checkpoints"]["every"], 3) << o.out;
  EXPECT_GT(straight.size(), 10000u);
  EXPECT_TRUE(straight == testing::file_bytes(dir.path() + "/restarted.safetensors"))
      << "the restarted run's weights differ from the uninterrupted run's";
}

// No memory checkpoint before the failure: the disk's is the newest state every rank has.
TEST(Restart, WithoutAMemoryCheckpointTheDiskOneIsUsed) {
  testing::TempFolder dir("vitddp_restart_disk");
  const std::string args = "--procs 2 " + kRun;
  const std::string straight = straight_weights(dir, args);
  TrainOutcome o = testing::run_train(
      "VITDDP_FAULT=0:5:exit", args + " --max-restarts 1 --set memory-checkpoint-every=100 --checkpoint-dir " +
                                   dir.path() + "/ckpt --checkpoint-every 3 --save " + dir.path() + "/restarted.safetensors");
  ASSERT_EQ(o.code, 0) << o.out;
  const nlohmann::json j = o.json();
  EXPECT_EQ(j["recovery"]["restored_from"], "disk") << o.out;
  EXPECT_EQ(j["recovery"]["step"], 3) << o.out;
  EXPECT_TRUE(straight == testing::file_bytes(dir.path() + "/restarted.safetensors")) << o.out;
}

// The interval is chosen after the first timed step when not set, the same on every rank.
TEST(Restart, TheMemoryCheckpointIntervalIsChosenAndSaid) {
  TrainOutcome o = testing::run_train("", "--procs 2 " + kRun + " --max-restarts 1 --set untimed-steps=2");
  ASSERT_EQ(o.code, 0) << o.out;
  const nlohmann::json m = o.json()["memory_checkpoints"];
  EXPECT_GE(m["every"].get<int64_t>(), 1) << o.out;
  EXPECT_GE(m["saves"].get<int64_t>(), 1) << o.out;
  EXPECT_NE(o.out.find("memory checkpoints: every " + std::to_string(m["every"].get<int64_t>()) +
                       " steps (a step waited "),
            std::string::npos)
      << o.out;
  EXPECT_GT(m["copy_seconds"].get<double>(), 0) << o.out;
  EXPECT_GT(m["write_seconds"].get<double>(), 0) << o.out;
  EXPECT_TRUE(o.json()["recovery"].is_null()) << "nothing was restored:\n" << o.out;
}

TEST(Restart, ARestartBudgetThatRunsOutEndsWithTheFirstFailure) {
  TrainOutcome o = testing::run_train("VITDDP_FAULT=1:3:exit:every", "--procs 2 " + kRun + " --max-restarts 2");
  EXPECT_EQ(o.code, 7) << o.out;
  EXPECT_NE(o.out.find("launcher: restarting the ranks (restart 2 of 2)"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("launcher: the restart budget (--max-restarts 2) is spent; the first failure: rank 1 exited "
                       "with status 7"),
            std::string::npos)
      << o.out;
}

TEST(Restart, OneProcessRestartsToo) {
  testing::TempFolder dir("vitddp_restart_one");
  const std::string one = kRun + " --set ddp=true";  // PowerSGD needs DDP's buckets
  const std::string straight = straight_weights(dir, one);
  TrainOutcome o = testing::run_train("VITDDP_FAULT=0:5:exit", one + " --max-restarts 1 --set memory-checkpoint-every=3 "
                                                               "--save " + dir.path() + "/restarted.safetensors");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_EQ(o.json()["recovery"]["restored_from"], "memory") << o.out;
  EXPECT_EQ(o.json()["recovery"]["step"], 3) << o.out;
  EXPECT_TRUE(straight == testing::file_bytes(dir.path() + "/restarted.safetensors")) << o.out;
}

// Two hosts of two ranks (network namespaces): a rank killed on host 1 restarts all four, each
// from its own node's memory, and the run ends with the uninterrupted weights.
TEST(Restart, AKilledRankOnOneOfTwoHostsRestartsFromMemory) {
  testing::TwoHosts hosts;
  REQUIRE_TWO_HOSTS(hosts);
  testing::TempFolder dir("vitddp_restart_hosts");
  const std::string straight = straight_weights(dir, "--procs 4 " + kRun);
  auto node = [&](int h, const std::string& env) {
    return testing::run_train(hosts.on(h, env), "--procs 2 --nnodes 2 --set node-rank=" + std::to_string(h) +
                                                    " --rendezvous " + dir.path() + "/rdzv " + kRun +
                                                    " --max-restarts 1 --set memory-checkpoint-every=3 --save " +
                                                    dir.path() + "/restarted.safetensors");
  };
  std::future<TrainOutcome> second = std::async(std::launch::async, node, 1, "VITDDP_FAULT=3:5:kill");
  TrainOutcome first = node(0, "");
  TrainOutcome other = second.get();
  ASSERT_EQ(first.code, 0) << first.out << "\n--- host 1:\n" << other.out;
  ASSERT_EQ(other.code, 0) << other.out;
  EXPECT_NE(other.out.find("launcher: rank 3 (node 1) was killed by signal 9"), std::string::npos) << other.out;
  EXPECT_NE(first.out.find("launcher: restarting the ranks (restart 1 of 1)"), std::string::npos) << first.out;
  EXPECT_EQ(first.json()["recovery"]["restored_from"], "memory") << first.out;
  EXPECT_EQ(first.json()["recovery"]["step"], 3) << first.out;
  EXPECT_TRUE(straight == testing::file_bytes(dir.path() + "/restarted.safetensors")) << first.out;
}

TEST(Restart, BadRestartFlagsAreOneLine) {
  testing::expect_refused_in_one_line("--max-restarts -1", "--max-restarts must be in [0, 1000]");
  testing::expect_refused_in_one_line("--resume", "--checkpoint-every and --resume need --checkpoint-dir");
}

}  // namespace
}  // namespace vitddp
