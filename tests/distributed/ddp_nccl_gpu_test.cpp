// DDP over NCCL on 2 GPUs: the same equivalence as the Gloo tests (ranks identical after every
// step, equal to one process on the whole batch within 1e-5 relative in fp32).
#include <gtest/gtest.h>

#include "common/ddp_harness.h"

namespace vitddp {
namespace {

using testing::check_ddp_equivalence;

TEST(DdpNccl, TwoGpusEqualOneProcessForBucketLayoutsAndHooks) {
  // Counted through nvidia-smi: this process must not initialise CUDA before forking ranks.
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  for (bool view : {true, false}) {
    for (double mb : {0.02, 100.0}) {
      TrainConfig config;
      config.bucket_mb = mb;
      config.first_bucket_mb = mb / 4;
      config.grad_as_bucket_view = view;
      check_ddp_equivalence(2, DeviceType::kCUDA, config, 1e-5,
                            "view " + std::to_string(view) + ", bucket " + std::to_string(mb) + " MB");
    }
  }
  for (const char* hook : {"fp16", "bf16"}) {
    TrainConfig config;
    config.bucket_mb = 0.05;
    config.hook = hook;
    check_ddp_equivalence(2, DeviceType::kCUDA, config, std::string(hook) == "fp16" ? 2e-3 : 1e-2, hook);
  }
}

}  // namespace
}  // namespace vitddp
