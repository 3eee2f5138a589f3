// `train --procs N` end to end: the launcher starts N ranks over Gloo; a rank that dies makes
// the launcher stop the others and exit naming it; bad DDP flags fail before anything starts;
// --set ddp=true on one process trains exactly as without.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "common/multiprocess.h"
#include "common/run_checks.h"
#include "common/test_utils.h"
#include "common/train_process.h"

namespace vitddp {
namespace {

using Outcome = testing::TrainOutcome;
Outcome run(const std::string& env, const std::string& args) { return testing::run_train(env, args); }

const std::string kTiny = "--model vit_tiny --batch-size 4 --set workers=1 --print-every 1";

TEST(DdpCli, TwoCpuRanksTrain) {
  Outcome o = run("", "--procs 2 --steps 3 --bucket-mb 0.05 --json " + kTiny);
  ASSERT_EQ(o.code, 0) << o.out;
  const nlohmann::json j = o.json();
  EXPECT_EQ(j["world_size"], 2) << o.out;
  EXPECT_EQ(j["backend"], "gloo") << o.out;
  EXPECT_EQ(j["model"], "vit_tiny") << o.out;
  EXPECT_EQ(j["losses"].size(), 3u) << o.out;
  EXPECT_GT(j["buckets"].get<int64_t>(), 1) << o.out;  // 0.05 MB buckets: several
  // Each bucket's size, in bucket order: every f32 gradient of vit_tiny's 81,226 parameters once.
  ASSERT_EQ(j["bucket_bytes"].size(), j["buckets"].get<size_t>()) << o.out;
  int64_t total = 0;
  for (const auto& b : j["bucket_bytes"]) total += b.get<int64_t>();
  EXPECT_EQ(total, 81226 * 4) << o.out;
  // Only rank 0 reports: one summary line and one JSON line.
  EXPECT_NE(o.out.find("summary:"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("summary:"), o.out.rfind("summary:")) << o.out;
  EXPECT_EQ(o.out.find("\n{\""), o.out.rfind("\n{\"")) << o.out;
}

// --set ddp=true on one process takes the data-parallel path (a Gloo group of one, the reducer, its
// buckets and hook) and must train exactly as the plain path: the same weights, bit for bit.
TEST(DdpCli, DdpOnOneProcessGivesTheSameWeights) {
  testing::TempFolder dir("vitddp_ddp1");
  const std::string args = "--steps 3 --bucket-mb 0.05 --momentum 0.9 " + kTiny;
  Outcome plain = run("", args + " --json --save " + dir.path() + "/plain.safetensors");
  ASSERT_EQ(plain.code, 0) << plain.out;
  EXPECT_TRUE(plain.json()["backend"].is_null()) << "no process group without DDP:\n" << plain.out;
  Outcome ddp = run("", args + " --set ddp=true --json --save " + dir.path() + "/ddp.safetensors");
  ASSERT_EQ(ddp.code, 0) << ddp.out;
  EXPECT_EQ(ddp.json()["backend"], "gloo") << ddp.out;
  EXPECT_EQ(ddp.json()["world_size"], 1) << ddp.out;
  EXPECT_GT(ddp.json()["buckets"].get<int64_t>(), 1) << ddp.out;
  auto bytes = [&](const std::string& name) {
    std::ifstream in(dir.path() + "/" + name, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string a = bytes("plain.safetensors"), b = bytes("ddp.safetensors");
  EXPECT_GT(a.size(), 10000u);
  EXPECT_TRUE(a == b) << "the weights differ with --set ddp=true on one process";
}

TEST(DdpCli, ADeadRankStopsTheRunAndIsNamed) {
  Outcome o = run("VITDDP_FAULT=1:1:exit", "--procs 2 --steps 5 --set timeout=10 " + kTiny);
  EXPECT_EQ(o.code, 7) << o.out;
  EXPECT_NE(o.out.find("launcher: rank 1 exited with status 7"), std::string::npos) << o.out;
  EXPECT_LT(o.seconds, 10 + 10) << o.out;
}

TEST(DdpCli, AKilledRankIsNamedWhateverOrderTheRanksEnd) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    Outcome o = run("VITDDP_FAULT=1:1:kill", "--procs 2 --steps 5 --set timeout=10 " + kTiny);
    EXPECT_EQ(o.code, 128 + 9) << o.out;
    EXPECT_NE(o.out.find("launcher: rank 1 was killed by signal 9"), std::string::npos) << o.out;
  }
}

TEST(DdpCli, AHungRankTimesOutWithinTheTimeout) {
  Outcome o = run("VITDDP_FAULT=1:3:hang", "--procs 2 --steps 5 --set timeout=3 " + kTiny);
  EXPECT_EQ(o.code, 4) << o.out;
  EXPECT_NE(o.out.find("Timed out"), std::string::npos) << o.out;
  // Rank 0's message names the rank that did not come (Note [Naming the late rank]).
  EXPECT_NE(o.out.find("train: rank 0: error: "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("rank 1 had not reached collective #"), std::string::npos) << o.out;
  EXPECT_LT(o.seconds, 3 + 10) << o.out;
}

TEST(DdpCli, BadDdpFlagsFailBeforeLaunching) {
  for (auto [args, message] : {std::pair<std::string, std::string>{"--procs 2 --bucket-mb 0", "--bucket-mb must be > 0"},
                               {"--procs 2 --hook zip", "unknown hook 'zip'"},
                               {"--procs 2 --powersgd-rank 0", "--powersgd-rank must be >= 1"},
                               {"--procs 2 --set update=sharded --hook bf16", "update sharded reduce-scatters"},
                               {"--procs 2 --gpus 2", "--gpus and --procs exclude each other"},
                               {"--gpus 2", "--gpus 2 asked for but 0 GPU(s) visible"}}) {
    testing::expect_refused_in_one_line(args + " " + kTiny, message);
  }
}

TEST(DdpCli, BadRankEnvironmentIsAClearError) {
  Outcome o = run("RANK=3 WORLD_SIZE=2 VITDDP_RENDEZVOUS=/tmp", "--steps 1 " + kTiny);
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.out.find("RANK=3 is not below WORLD_SIZE=2"), std::string::npos) << o.out;
  o = run("RANK=0 LOCAL_RANK=3 WORLD_SIZE=4 VITDDP_RENDEZVOUS=/tmp", "--procs 2 --steps 1 " + kTiny);
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.out.find("this rank's local rank is 3"), std::string::npos) << o.out;
  o = run("RANK=x WORLD_SIZE=2", "--steps 1 " + kTiny);
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.out.find("RANK='x'"), std::string::npos) << o.out;
}

}  // namespace
}  // namespace vitddp
