// `train --gpus 2 --update-in-backward` over NCCL (Note [Updates in backward]): each bucket's
// update on a stream of its own beside backward gives the plain update's weights bit for bit, in
// fp32 and in bf16 (f32 master weights and their bf16 copy rewritten while backward runs),
// eagerly and captured in a CUDA graph; AdamW keeps the graph off and says why; a NaN in a
// replayed step still stops the run at that step. Skipped without 2 GPUs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/ddp_harness.h"
#include "common/multiprocess.h"
#include "common/train_process.h"
#include "framework/io/safetensors.h"

namespace vitddp {
namespace {

double worst_difference(const std::string& a_path, const std::string& b_path) {
  const SafetensorsFile a = read_safetensors(a_path), b = read_safetensors(b_path);
  EXPECT_EQ(a.tensors.size(), b.tensors.size());
  double worst = 0;
  for (size_t i = 0; i < a.tensors.size() && i < b.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].first, b.tensors[i].first);
    const std::vector<double> u = a.tensors[i].second.to_vector(), v = b.tensors[i].second.to_vector();
    EXPECT_EQ(u.size(), v.size()) << a.tensors[i].first;
    for (size_t k = 0; k < u.size() && k < v.size(); ++k) worst = std::max(worst, std::abs(u[k] - v[k]));
  }
  return worst;
}

// Products chosen by cuBLASLt's heuristic, not by timing: the same in every run.
int issued_beside_backward(const std::string& out) {
  const std::string key = "updates in backward: ";
  const size_t at = out.find(key);
  return at == std::string::npos ? -1 : std::stoi(out.substr(at + key.size()));
}

const std::string kBase = "--gpus 2 --timeout 60 --model vit_tiny --data gpu --batch-size 32 --warmup 0 --steps 6 "
                          "--print-every 0 --gemm-autotune=false";

TEST(UpdateInBackwardGpu, GivesTheWeightsOfThePlainUpdateEagerlyAndInAGraph) {
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  testing::TempFolder dir("vitddp_uib_gpu");
  for (const std::string setting : {std::string("--precision fp32 --bucket-mb 0.05 --momentum 0.9"),
                                    // vit_tiny's bf16 gradients (162 kB) in several buckets: a
                                    // step's last bucket is the only one updated after backward.
                                    std::string("--precision bf16 --bucket-mb 0.05 --hook bf16 --momentum 0.9"),
                                    std::string("--precision bf16 --bucket-mb 0.05"),
                                    // Gradients copied out of the buckets, on the update stream.
                                    std::string("--precision fp32 --bucket-mb 0.05 --grad-as-bucket-view=false")}) {
    SCOPED_TRACE(setting);
    const std::string args = kBase + " " + setting;
    const std::string plain = (dir / "plain.safetensors").string(), eager = (dir / "eager.safetensors").string(),
                      graphed = (dir / "graph.safetensors").string();
    testing::TrainOutcome a = testing::run_train("", args + " --save " + plain, true, 300);
    ASSERT_EQ(a.code, 0) << a.out;
    testing::TrainOutcome b = testing::run_train("", args + " --update-in-backward --save " + eager, true, 300);
    ASSERT_EQ(b.code, 0) << b.out;
    EXPECT_NE(b.out.find(", updates in backward"), std::string::npos) << b.out;
    EXPECT_EQ(worst_difference(plain, eager), 0.0);
    EXPECT_GE(issued_beside_backward(b.out), 5) << b.out;  // steps 2 to 6, at least one bucket each
    testing::TrainOutcome c =
        testing::run_train("", args + " --update-in-backward --cuda-graph --save " + graphed, true, 300);
    ASSERT_EQ(c.code, 0) << c.out;
    EXPECT_NE(c.out.find("cuda graph: step 3 captured ("), std::string::npos) << c.out;
    EXPECT_NE(c.out.find("cuda graph: 3 step(s) replayed"), std::string::npos) << c.out;
    EXPECT_EQ(worst_difference(plain, graphed), 0.0);
    EXPECT_GE(issued_beside_backward(c.out), 2) << c.out;  // step 2, eager, and step 3, captured
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
  EXPECT_EQ(worst_difference(plain, updated), 0.0);
}

TEST(UpdateInBackwardGpu, ANanInAReplayStopsTheRunAtItsStep) {
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  testing::TrainOutcome o = testing::run_train(
      "VITDDP_FAULT=1:4:nan", kBase + " --precision bf16 --bucket-mb 0.05 --update-in-backward --cuda-graph", true, 300);
  EXPECT_EQ(o.code, 5) << o.out;
  EXPECT_NE(o.out.find("cuda graph: step 3 captured"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("step 5 (rank 0): non-finite gradient in "), std::string::npos) << o.out;
}

}  // namespace
}  // namespace vitddp
