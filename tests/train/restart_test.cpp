// Elastic restarts (--max-restarts, Note [Elastic restarts] in distributed/launcher.cpp): a rank
// killed mid-training makes the launchers restart every rank, which go on from the newest state
// all of them have (this node's memory checkpoints, else --checkpoint-dir) and end with the
// weights of a run that was never interrupted, bit for bit; --json says where the state came
// from. A budget that runs out ends the run with the first failure's code and line. A host lost
// whole is replaced by the same command started again, restored from its buddy's replica.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/multiprocess.h"
#include "common/run_checks.h"
#include "common/train_process.h"
#include "common/two_hosts.h"
#include "distributed/file_store.h"
#if VITDDP_WITH_LIBFABRIC
#include "distributed/transfer/buddy_replicas.h"
#endif

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

// Host `h`'s command of a two-host run of `run` in `dir`, memory checkpoints every 3 steps.
std::string host_args(int h, const testing::TempFolder& dir, const std::string& run) {
  return "--procs 2 --nnodes 2 --set node-rank=" + std::to_string(h) + " --rendezvous " + dir.path() + "/rdzv " + run +
         " --max-restarts 1 --set memory-checkpoint-every=3 --save " + dir.path() + "/restarted.safetensors";
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
    return testing::run_train(hosts.on(h, env), host_args(h, dir, kRun));
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

#if VITDDP_WITH_LIBFABRIC
// Two hosts of two ranks, host 1 lost whole (its launcher and ranks killed, its /dev/shm folder
// gone) once node 0 holds node 1's memory checkpoint of step 6 as its buddy; rank 2 hangs in
// step 6 meanwhile, so the run cannot end first. The same command started again on host 1 takes
// the lost node's place, gets that checkpoint back from node 0, and the run ends with the
// uninterrupted weights: ranks 0-1 restored from their node's memory, 2-3 from the buddy's. The
// run's --checkpoint-dir (step 4 on disk) is the replacement's to resume, not refused as a used one.
TEST(Restart, AHostLostWholeIsReplacedAndRestoredFromItsBuddy) {
  testing::TwoHosts hosts;
  REQUIRE_TWO_HOSTS(hosts);
  testing::TempFolder dir("vitddp_restart_lost_host");
  const std::string run = kRun + " --set timeout=60";  // the hang must outlast the push of step 6
  const std::string straight = straight_weights(dir, "--procs 4 " + run);
  auto node = [&](int h, const std::string& env) {
    return testing::run_train(hosts.on(h, env),
                              host_args(h, dir, run) + " --checkpoint-dir " + dir.path() + "/ckpt --checkpoint-every 4",
                              false, 240);
  };
  std::future<TrainOutcome> first = std::async(std::launch::async, node, 0, "");
  std::future<TrainOutcome> lost = std::async(std::launch::async, node, 1, "VITDDP_FAULT=2:6:hang");
  // Node 0 holds node 1's step 6 once the key says so (written after the last write landed).
  const std::string held_file = [&] {
    for (int i = 0; i < 600; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (std::filesystem::exists(dir.path() + "/rdzv/store")) {
        FileStore store(dir.path() + "/rdzv/store");
        if (store.has(transfer::BuddyReplicas::held_key(1)) &&
            store.get(transfer::BuddyReplicas::held_key(1), std::chrono::seconds(1)) == "6")
          return std::string("6");
      }
    }
    return std::string();
  }();
  const std::vector<int> killed = hosts.kill_all(1);
  TrainOutcome gone = lost.get();
  ASSERT_EQ(held_file, "6") << "node 0 never held node 1's step 6:\n" << gone.out;
  ASSERT_FALSE(killed.empty());
  for (int pid : killed)  // the host's memory went with it
    std::filesystem::remove_all("/dev/shm/vitddp-memory-" + std::to_string(pid) + "-node1");
  TrainOutcome replacement = node(1, "");
  TrainOutcome survivor = first.get();
  ASSERT_EQ(replacement.code, 0) << replacement.out << "\n--- host 0:\n" << survivor.out;
  ASSERT_EQ(survivor.code, 0) << survivor.out;
  EXPECT_NE(replacement.out.find("taking the place of the lost node 1"), std::string::npos) << replacement.out;
  EXPECT_NE(replacement.out.find("node 0 handed back this node's memory checkpoint of step 6"), std::string::npos)
      << replacement.out;
  const nlohmann::json r = survivor.json()["recovery"];
  EXPECT_EQ(r["restart"], 1) << survivor.out;
  EXPECT_EQ(r["step"], 6) << survivor.out;
  EXPECT_EQ(r["by_rank"], nlohmann::json({"memory", "memory", "buddy", "buddy"})) << survivor.out;
  EXPECT_GT(r["recovery_seconds"].get<double>(), 0) << survivor.out;
  EXPECT_TRUE(straight == testing::file_bytes(dir.path() + "/restarted.safetensors"))
      << "the weights differ from the uninterrupted run's\n" << survivor.out << "\n--- host 1:\n" << replacement.out;
}
#endif

TEST(Restart, BadRestartFlagsAreOneLine) {
  testing::expect_refused_in_one_line("--max-restarts -1", "--max-restarts must be in [0, 1000]");
  testing::expect_refused_in_one_line("--resume", "--checkpoint-every and --resume need --checkpoint-dir");
  testing::expect_refused_in_one_line("--set join-timeout=0", "join-timeout must be in [0.001, 1e7] seconds");
}

}  // namespace
}  // namespace vitddp
