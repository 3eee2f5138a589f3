// `train --gpus 2 --set transport=host-copy` (Note [Host-copy all-reduce]): DDP's all-reduces through
// shared host memory and the copy engines give the weights of NCCL's all-reduce bit for bit, in
// fp32 (many small buckets) and bf16 (the bf16 hook), eagerly and replayed in a CUDA graph, also
// with NCCL's P2P transport off, and with the all-reduces overlapping and the additions beside the
// copies. Skipped without 2 GPUs.
#include <gtest/gtest.h>

#include <algorithm>

#include "common/ddp_harness.h"
#include "common/multiprocess.h"
#include "common/run_checks.h"
#include "common/train_process.h"

namespace vitddp {
namespace {

const std::string kBase = testing::kTwoTinyGpuRanks + " --steps 6 --momentum 0.9";
// Two GPUs with nothing pinned: the program chooses.
const std::string kChosenBase = "--gpus 2 --set timeout=60 --model vit_tiny --data gpu --batch-size 32 --print-every 0 "
                                "--set gemm-autotune=false --steps 6 --momentum 0.9 --bucket-mb 0.05";

TEST(HostCopyTrainGpu, TheWeightsEqualNcclsAllReduce) {
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  for (const std::string setting : {std::string("--precision fp32 --bucket-mb 0.05"),
                                    std::string("--precision bf16 --bucket-mb 0.5 --hook bf16")}) {
    SCOPED_TRACE(setting);
    // Eagerly and replayed in a CUDA graph (Note [Replaying host copies]): the plain run's weights.
    const testing::FlagRuns runs =
        testing::expect_flags_keep_the_weights(kBase + " " + setting, "--set transport=host-copy", "vitddp_host_copy", 3);
    EXPECT_EQ(runs.eager.json()["backend"], "nccl+host-copy") << runs.eager.out;
    EXPECT_EQ(runs.graphed.json()["backend"], "nccl+host-copy") << runs.graphed.out;
    // And with NCCL's peer-to-peer transport off, as on the servers the transport is for.
    testing::TempFolder dir("vitddp_host_copy_p2p_off");
    const std::string plain = (dir / "plain.safetensors").string(), no_p2p = (dir / "no_p2p.safetensors").string();
    const testing::TrainOutcome a = testing::run_train("", kBase + " " + setting + " --save " + plain, true, 300);
    ASSERT_EQ(a.code, 0) << a.out;
    const testing::TrainOutcome c = testing::run_train(
        "NCCL_P2P_DISABLE=1", kBase + " " + setting + " --set transport=host-copy --cuda-graph --save " + no_p2p, true, 300);
    ASSERT_EQ(c.code, 0) << c.out;
    EXPECT_EQ(testing::worst_weight_difference(plain, no_p2p), 0.0);
  }
}

// Note [Back-to-back host copies] and Note [Reductions beside the copies]: the buckets'
// all-reduces overlapping, with the additions beside the copies, give the weights of NCCL's
// all-reduce, eagerly and replayed in a CUDA graph, also with NCCL's P2P transport off.
TEST(HostCopyTrainGpu, OverlapAndAdditionsBesideKeepTheWeights) {
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  for (const std::string setting : {std::string("--precision fp32 --bucket-mb 0.05"),
                                    std::string("--precision bf16 --bucket-mb 0.5 --hook bf16")}) {
    SCOPED_TRACE(setting);
    testing::expect_flags_keep_the_weights(kBase + " " + setting,
                                           "--set transport=host-copy --set host-copy-overlap=true --set host-copy-reduce-beside=true",
                                           "vitddp_host_copy_overlap", 3);
  }
}

// Note [Chosen settings]: two GPUs without peer access take the host copy when nothing says
// otherwise (and say so), with the weights of NCCL's all-reduce.
TEST(HostCopyTrainGpu, TheProgramChoosesItWithoutPeerAccess) {
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const testing::TrainOutcome a = testing::expect_chosen_setting_keeps_the_weights(
      "NCCL_P2P_DISABLE=1", kChosenBase, "transport", "host-copy", "--set transport=nccl", "vitddp_host_copy_chosen");
  EXPECT_EQ(a.json()["chosen"][0]["key"], "transport") << a.out;
  EXPECT_NE(a.out.find("chosen: transport host-copy (NCCL_P2P_DISABLE=1: "), std::string::npos) << a.out;
}

TEST(HostCopyTrainGpu, OneGpuWithoutDdpIsRefused) {
  if (testing::gpus_without_cuda_init() < 1) GTEST_SKIP() << "needs a GPU";
  const testing::TrainOutcome r = testing::run_train("", "--model vit_tiny --data gpu --steps 1 --set transport=host-copy",
                                                     true, 120);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("transport host-copy carries DDP's all-reduces: it needs GPU data parallelism"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

}  // namespace
}  // namespace vitddp
