// `train --gpus 2 --update-in-backward` over NCCL (Note [Updates in backward]): each bucket's
// update on a stream of its own beside backward gives the plain update's weights bit for bit, in
// fp32 and in bf16 (f32 master weights and their bf16 copy rewritten while backward runs),
// eagerly and captured in a CUDA graph; AdamW keeps the graph off and says why; a NaN in a
// replayed step still stops the run at that step. Skipped without 2 GPUs.
#include <gtest/gtest.h>

#include "common/ddp_harness.h"
#include "common/multiprocess.h"
#include "common/run_checks.h"
#include "common/train_process.h"

namespace vitddp {
namespace {

const std::string kBase = testing::kTwoTinyGpuRanks + " --steps 6";

TEST(UpdateInBackwardGpu, GivesTheWeightsOfThePlainUpdateEagerlyAndInAGraph) {
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  for (const std::string setting : {std::string("--precision fp32 --bucket-mb 0.05 --momentum 0.9"),
                                    // vit_tiny's bf16 gradients (162 kB) in several buckets: a
                                    // step's last bucket is the only one updated after backward.
                                    std::string("--precision bf16 --bucket-mb 0.05 --hook bf16 --momentum 0.9"),
                                    std::string("--precision bf16 --bucket-mb 0.05"),
                                    // PowerSGD's expansion into each bucket on the update stream.
                                    std::string("--precision bf16 --bucket-mb 0.05 --hook powersgd --powersgd-rank 4 "
                                                "--powersgd-start-iter 1 --powersgd-error-dtype bucket --momentum 0.9"),
                                    // Gradients copied out of the buckets, on the update stream.
                                    std::string("--precision fp32 --bucket-mb 0.05 --grad-as-bucket-view=false")}) {
    SCOPED_TRACE(setting);
    const testing::FlagRuns runs =
        testing::expect_flags_keep_the_weights(kBase + " " + setting, "--update-in-backward", "vitddp_uib_gpu", 3);
    EXPECT_NE(runs.eager.out.find(", updates in backward"), std::string::npos) << runs.eager.out;
    // Steps 2 to 6 eagerly, at least one bucket each; with the graph, steps 2 (eager) and 3 (captured).
    EXPECT_GE(testing::updates_issued_beside_backward(runs.eager.out), 5) << runs.eager.out;
    EXPECT_GE(testing::updates_issued_beside_backward(runs.graphed.out), 2) << runs.graphed.out;
  }
}

TEST(UpdateInBackwardGpu, AdamWTrainsEagerlyAndSaysWhyThereIsNoGraph) {
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  testing::TempFolder dir("vitddp_uib_gpu_adamw");
  const std::string args = kBase + " --precision bf16 --bucket-mb 0.05 --optimizer adamw --lr 0.001";
  const std::string plain = (dir / "plain.safetensors").string(), updated = (dir / "updated.safetensors").string();
  testing::TrainOutcome a = testing::run_train("", args + " --save " + plain, true, 300);
  ASSERT_EQ(a.code, 0) << a.out;
  testing::TrainOutcome b =
      testing::run_train("", args + " --update-in-backward --cuda-graph --save " + updated, true, 300);
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_NE(b.out.find("cuda graph: off, every step runs eagerly: --update-in-backward with adamw"), std::string::npos)
      << b.out;
  EXPECT_EQ(testing::worst_weight_difference(plain, updated), 0.0);
}

TEST(UpdateInBackwardGpu, ANanInAReplayStopsTheRunAtItsStep) {
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  testing::TrainOutcome o =
      testing::run_train("VITDDP_FAULT=1:4:nan",
                         kBase + " --precision bf16 --bucket-mb 0.05 --update-in-backward --cuda-graph", true, 300);
  EXPECT_EQ(o.code, 5) << o.out;
  EXPECT_NE(o.out.find("cuda graph: step 3 captured"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("step 5 (rank 0): non-finite gradient in "), std::string::npos) << o.out;
}

}  // namespace
}  // namespace vitddp
