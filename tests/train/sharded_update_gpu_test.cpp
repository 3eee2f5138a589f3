// `train --gpus 2 --set update=sharded` over NCCL (Note [Sharded updates]): each rank updates its part
// of each bucket and the weights are all-gathered, in fp32 and in bf16 (where each rank's f32
// master weights stay whole only in its own parts until a save gathers them), eagerly and
// captured in a CUDA graph, giving the plain update's weights bit for bit; checkpoints resume
// exactly in bf16; a NaN in a replayed step stops the run at that step. Skipped without 2 GPUs.
#include <gtest/gtest.h>

#include "common/ddp_harness.h"
#include "common/multiprocess.h"
#include "common/run_checks.h"
#include "common/train_process.h"

namespace vitddp {
namespace {

const std::string kBase = testing::kTwoTinyGpuRanks + " --steps 6";

TEST(ShardedUpdateGpu, GivesTheWeightsOfThePlainUpdateEagerlyAndInAGraph) {
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  for (const std::string setting : {std::string("--precision fp32 --bucket-mb 0.05 --momentum 0.9"),
                                    std::string("--precision bf16 --bucket-mb 0.05 --momentum 0.9"),
                                    std::string("--precision bf16 --bucket-mb 0.05 --set tail-bucket-mb=0.01")}) {
    SCOPED_TRACE(setting);
    const testing::FlagRuns runs =
        testing::expect_flags_keep_the_weights(kBase + " " + setting, "--set update=sharded", "vitddp_shard_gpu", 3);
    EXPECT_NE(runs.eager.out.find(", updates in backward sharded over the 2 ranks"), std::string::npos)
        << runs.eager.out;
    EXPECT_GE(testing::updates_issued_beside_backward(runs.eager.out), 5) << runs.eager.out;
  }
}

// In bf16 each rank's f32 master weights are current only in its own parts between saves: a
// checkpoint must hold them whole, or the resumed run's bf16 weights (copied from the master)
// would differ from the straight run's.
TEST(ShardedUpdateGpu, CheckpointsResumeExactlyInBf16) {
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  testing::expect_checkpoints_resume_exactly(
      testing::kTwoTinyGpuRanks + " --precision bf16 --bucket-mb 0.05 --momentum 0.9 --set update=sharded",
      "vitddp_shard_resume_gpu", /*use_gpus=*/true);
}

// Note [Chosen settings]: two GPUs with peer access, in bf16 with SGD, shard their updates when
// nothing says otherwise, with the plain update's weights.
TEST(ShardedUpdateGpu, TheProgramChoosesItOverPeerAccessInBf16) {
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  testing::expect_chosen_setting_keeps_the_weights(
      "NCCL_P2P_DISABLE=0",
      "--gpus 2 --set timeout=60 --model vit_tiny --data gpu --batch-size 32 --print-every 0 --set gemm-autotune=false "
      "--steps 6 --momentum 0.9 --precision bf16 --bucket-mb 0.05",
      "update", "sharded", "--set update=after-backward", "vitddp_shard_chosen");
}

TEST(ShardedUpdateGpu, ANanInAReplayStopsTheRunAtItsStep) {
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  testing::TrainOutcome o = testing::run_train(
      "VITDDP_FAULT=1:4:nan", kBase + " --precision bf16 --bucket-mb 0.05 --set update=sharded --cuda-graph", true, 300);
  EXPECT_EQ(o.code, 5) << o.out;
  EXPECT_NE(o.out.find("cuda graph: step 3 captured"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("step 5 (rank 0): non-finite gradient in "), std::string::npos) << o.out;
}

}  // namespace
}  // namespace vitddp
