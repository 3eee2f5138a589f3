// DDP over NCCL on 2 GPUs: the same equivalence as the Gloo tests (ranks identical after every
// step, equal to one process on the whole batch within 1e-5 relative in fp32).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "common/ddp_harness.h"

namespace vitddp {
namespace {

TEST(DdpNccl, TwoGpusEqualOneProcessForBucketLayoutsAndHooks) {
  // Counted through nvidia-smi: this process must not initialise CUDA before forking ranks.
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  testing::check_bucket_layouts_and_hooks(2, DeviceType::kCUDA);
}

// PowerSGD over NCCL, its compression on two side streams beside backward and each bucket's
// expansion enqueued there (Note [PowerSGD beside backward]), in many small buckets (several in
// flight at once): ranks identical after every step, and the same updates as the plain CPU
// implementation over Gloo, whose hook runs each step in program order.
TEST(DdpNccl, TwoGpusPowerSgdInManyBucketsMatchesGlooOnTheCpu) {
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  for (int64_t rank : {1, 2}) {
    SCOPED_TRACE("powersgd rank " + std::to_string(rank));
    TrainConfig config;
    config.bucket_mb = 0.05;
    config.hook = "powersgd";
    config.powersgd_rank = rank;
    config.powersgd_start_iter = 1;
    const std::vector<std::vector<double>> gpu = testing::ddp_weights(2, DeviceType::kCUDA, config);
    const std::vector<std::vector<double>> cpu = testing::ddp_weights(2, DeviceType::kCPU, config);
    ASSERT_EQ(gpu.size(), cpu.size());
    ASSERT_FALSE(gpu.empty());
    for (size_t step = 0; step < gpu.size(); ++step) {
      const double e = testing::relative_update_error(gpu[step], cpu[step]);
      EXPECT_LE(e, 1e-3) << "updates after step " << step << " differ from the CPU's";
      std::printf("powersgd rank %lld, step %zu: GPU against CPU, relative update error %.3g\n",
                  static_cast<long long>(rank), step, e);
    }
  }
}

}  // namespace
}  // namespace vitddp
