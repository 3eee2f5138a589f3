// Overlap is real: on 2 GPUs, ViT-L/32 with 25 MB buckets, the trace's CUDA-event timestamps
// show bucket all-reduces starting on the comm stream while backward still runs on the compute
// stream, ready -> launch -> finish in order for every bucket, launches in index order.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "framework/core/devices.h"
#include "common/gpu.h"
#include "common/train_process.h"
#include "common/trace_run_checks.h"

namespace vitddp {
namespace {

namespace fs = std::filesystem;

TEST(OverlapGpu, BucketAllReducesStartBeforeBackwardEnds) {
  if (visible_gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const fs::path dir = fs::temp_directory_path() / ("vitddp_overlap_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "trace.json").string();
  // The plain update over NCCL, whatever the program would choose for two GPUs.
  testing::TrainOutcome o = testing::run_train(
      "NCCL_NVLS_ENABLE=0",
      "--gpus 2 --model vit_l_32 --data gpu --steps 5 --set untimed-steps=2 --bucket-mb 25 --print-every 0 "
      "--set update=after-backward --set transport=nccl --set timeout=120 --json --trace " + path,
      /*use_gpus=*/true, /*timeout_s=*/300);
  ASSERT_EQ(o.code, 0) << o.out;
  // The analysis in the JSON: the 3 timed steps of both ranks, and all-reduce time of which only
  // a part is exposed.
  const nlohmann::json j = o.json();
  ASSERT_TRUE(j.contains("trace")) << o.out;
  std::cout << j["trace"].dump() << std::endl;
  EXPECT_EQ(j["backend"], "nccl") << o.out;
  EXPECT_EQ(j["trace"]["steps"], 6) << o.out;
  EXPECT_GT(j["trace"]["comm_ms"].get<double>(), 0.0) << o.out;
  EXPECT_LT(j["exposed_comm_ms"].get<double>(), j["trace"]["comm_ms"].get<double>()) << o.out;
  nlohmann::json doc = testing::read_trace(path);
  testing::TracedRun run = testing::traced_steps(doc);
  ASSERT_FALSE(run.empty());
  // Marks on two streams are read through one clock: allow 20 us of slack. The bucket count
  // may change after the first step (Note [Bucket rebuild]).
  testing::check_traced_run(doc, 2, 5, /*buckets=*/0, 20.0);
  for (const auto& [key, s] : run) {
    SCOPED_TRACE("rank " + std::to_string(key.first) + " step " + std::to_string(key.second));
    const size_t buckets = s.buckets.size();
    ASSERT_GE(buckets, 5u);
    size_t started_during_backward = 0;
    for (size_t i = 0; i < s.buckets.size(); ++i) {
      const testing::TracedBucket& b = s.buckets[i];
      if (b.start < s.backward_end) ++started_during_backward;
      if (i > 0) EXPECT_LE(s.buckets[i - 1].end, b.start + 20.0) << "the comm stream runs one bucket at a time";
    }
    EXPECT_LT(s.buckets.front().start, s.backward_end) << "the first bucket waited for the end of backward";
    EXPECT_GE(started_during_backward, buckets / 2) << "most buckets should start while backward runs";
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace vitddp
