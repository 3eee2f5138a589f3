// `train --gpus 2 --nccl-register` (Note [Registered gradients]): the gradient buffer from
// ncclMemAlloc, registered with the communicator, gives the weights of the unregistered run bit
// for bit, eagerly and in a CUDA graph, in fp32 and bf16. Skipped without 2 GPUs.
#include <gtest/gtest.h>

#include "common/ddp_harness.h"
#include "common/run_checks.h"

namespace vitddp {
namespace {

const std::string kBase = testing::kTwoTinyGpuRanks + " --steps 6 --momentum 0.9";

TEST(NcclRegisterGpu, RegisteredGradientsGiveTheSameWeights) {
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  for (const std::string setting : {std::string("--precision fp32 --bucket-mb 0.05"),
                                    std::string("--precision bf16 --bucket-mb 0.5 --hook bf16")}) {
    SCOPED_TRACE(setting);
    const testing::FlagRuns runs =
        testing::expect_flags_keep_the_weights(kBase + " " + setting, "--nccl-register", "vitddp_nccl_register", 3);
    EXPECT_NE(runs.eager.out.find(", gradients registered with NCCL"), std::string::npos) << runs.eager.out;
  }
}

}  // namespace
}  // namespace vitddp
