// DDP over NCCL on 2 GPUs: the same equivalence as the Gloo tests (ranks identical after every
// step, equal to one process on the whole batch within 1e-5 relative in fp32).
#include <gtest/gtest.h>

#include "common/ddp_harness.h"

namespace vitddp {
namespace {

TEST(DdpNccl, TwoGpusEqualOneProcessForBucketLayoutsAndHooks) {
  // Counted through nvidia-smi: this process must not initialise CUDA before forking ranks.
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  testing::check_bucket_layouts_and_hooks(2, DeviceType::kCUDA);
}

}  // namespace
}  // namespace vitddp
