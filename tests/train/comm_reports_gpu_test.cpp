// `train bench allreduce --gpus 2` (NCCL, one process per GPU) and `train topology` on a
// machine with at least two GPUs: every size is reported and checked, every pair is named with
// the transport NCCL chose, and with NCCL_P2P_DISABLE=1 over NVLink the hint appears.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "common/gpu.h"
#include "common/train_process.h"

namespace vitddp {
namespace {

#define REQUIRE_TWO_GPUS()                                                                     \
  do {                                                                                         \
    VITDDP_REQUIRE_GPU();                                                                      \
    if (cuda::visible_device_count() < 2) GTEST_SKIP() << "needs two GPUs";                    \
  } while (0)

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The table row of pair a <-> b.
std::string pair_row(const std::string& out, int a, int b) {
  const size_t at = out.find("| " + std::to_string(a) + " <-> " + std::to_string(b) + " |");
  return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
}

TEST(CommReportsGpu, AllreduceBenchOverTwoGpus) {
  REQUIRE_TWO_GPUS();
  testing::TrainOutcome o = testing::run_train(
      "", "bench allreduce --gpus 2 --sizes 4K,1M,64M,1224M --iters 5 --warmup-iters 2", /*use_gpus=*/true, 600);
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("over 2 ranks: nccl on cuda, f32"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("(CUDA events)"), std::string::npos) << o.out;
  for (const char* size : {"| 4 KiB ", "| 1 MiB ", "| 64 MiB ", "| 1224 MiB "})
    EXPECT_NE(o.out.find(size), std::string::npos) << size << "\n" << o.out;
  EXPECT_EQ(count_of(o.out, "| ok |"), 4) << o.out;
}

// Small collectives are not slowed by the host: enqueueing on the non-blocking communicator
// once slept a few hundred microseconds per call (NCCL itself takes tens). The bound, 250 us,
// sits between what a 1 MiB all-reduce over NVLink takes now and what it took with the sleep
// (docs/tried.md, "NCCL enqueue spins before sleeping").
TEST(CommReportsGpu, SmallAllreduceIsNotHostBound) {
  REQUIRE_TWO_GPUS();
  testing::TrainOutcome o = testing::run_train(
      "NCCL_P2P_DISABLE=0", "bench allreduce --gpus 2 --sizes 1M --iters 20 --warmup-iters 5 --json", true, 600);
  ASSERT_EQ(o.code, 0) << o.out;
  const size_t at = o.out.find("{\"");
  ASSERT_NE(at, std::string::npos) << o.out;
  nlohmann::json j = nlohmann::json::parse(o.out.substr(at, o.out.find('\n', at) - at));
  EXPECT_LT(j["time_us"].get<double>(), 250.0) << o.out;
}

TEST(CommReportsGpu, AllreduceBenchBf16Json) {
  REQUIRE_TWO_GPUS();
  testing::TrainOutcome o = testing::run_train(
      "", "bench allreduce --gpus 2 --dtype bf16 --sizes 2K,16M --iters 3 --json", /*use_gpus=*/true, 600);
  ASSERT_EQ(o.code, 0) << o.out;
  std::istringstream lines(o.out);
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') continue;  // NCCL may print its own lines
    nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j["backend"], "nccl");
    EXPECT_EQ(j["dtype"], "bf16");
    EXPECT_EQ(j["check"], "ok");
    EXPECT_GT(j["busbw_gbps"].get<double>(), 0.0);
    ++rows;
  }
  EXPECT_EQ(rows, 2) << o.out;
}

TEST(CommReportsGpu, TopologyNamesEveryPairAndTheNcclTransport) {
  REQUIRE_TWO_GPUS();
  testing::TrainOutcome o = testing::run_train("", "topology", /*use_gpus=*/true, 300);
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("GPUs (CUDA order):"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("NCCL "), std::string::npos) << o.out;
  const int n = cuda::visible_device_count();
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) {
      const std::string row = pair_row(o.out, a, b);
      ASSERT_FALSE(row.empty()) << a << "-" << b << "\n" << o.out;
      EXPECT_EQ(row.find("none seen"), std::string::npos) << row;  // NCCL connected every pair
      if (o.out.find("NVML: driver") != std::string::npos) EXPECT_EQ(row.find("unknown"), std::string::npos) << row;
    }
}

TEST(CommReportsGpu, TopologyHintsWhenP2pIsDisabledOverNvlink) {
  REQUIRE_TWO_GPUS();
  testing::TrainOutcome o = testing::run_train("NCCL_P2P_DISABLE=1", "topology", /*use_gpus=*/true, 300);
  ASSERT_EQ(o.code, 0) << o.out;
  const std::string row = pair_row(o.out, 0, 1);
  ASSERT_FALSE(row.empty()) << o.out;
  EXPECT_EQ(row.find("P2P/"), std::string::npos) << row;  // not peer-to-peer
  if (row.find("NVLink") != std::string::npos) {
    EXPECT_NE(o.out.find("hint: "), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("NCCL_P2P_DISABLE=1 is set"), std::string::npos) << o.out;
  }
}

}  // namespace
}  // namespace vitddp
