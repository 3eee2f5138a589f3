// `train --gpus 2 --nccl-register` (Note [Registered gradients]): the gradient buffer from
// ncclMemAlloc, registered with the communicator, gives the weights of the unregistered run bit
// for bit, eagerly and in a CUDA graph, in fp32 and bf16. Skipped without 2 GPUs.
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
    const std::vector<double> u = a.tensors[i].second.to_vector(), v = b.tensors[i].second.to_vector();
    EXPECT_EQ(u.size(), v.size()) << a.tensors[i].first;
    for (size_t k = 0; k < u.size() && k < v.size(); ++k) worst = std::max(worst, std::abs(u[k] - v[k]));
  }
  return worst;
}

// Products chosen by cuBLASLt's heuristic, not by timing: the same in every run.
const std::string kBase = "--gpus 2 --timeout 60 --model vit_tiny --data gpu --batch-size 32 --warmup 0 --steps 6 "
                          "--print-every 0 --gemm-autotune=false --momentum 0.9";

TEST(NcclRegisterGpu, RegisteredGradientsGiveTheSameWeights) {
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  testing::TempFolder dir("vitddp_nccl_register");
  for (const std::string setting : {std::string("--precision fp32 --bucket-mb 0.05"),
                                    std::string("--precision bf16 --bucket-mb 0.5 --hook bf16")}) {
    SCOPED_TRACE(setting);
    const std::string args = kBase + " " + setting;
    const std::string plain = (dir / "plain.safetensors").string(), eager = (dir / "eager.safetensors").string(),
                      graphed = (dir / "graph.safetensors").string();
    testing::TrainOutcome a = testing::run_train("", args + " --save " + plain, true, 300);
    ASSERT_EQ(a.code, 0) << a.out;
    testing::TrainOutcome b = testing::run_train("", args + " --nccl-register --save " + eager, true, 300);
    ASSERT_EQ(b.code, 0) << b.out;
    EXPECT_NE(b.out.find(", gradients registered with NCCL"), std::string::npos) << b.out;
    EXPECT_EQ(worst_difference(plain, eager), 0.0);
    testing::TrainOutcome c =
        testing::run_train("", args + " --nccl-register --cuda-graph --save " + graphed, true, 300);
    ASSERT_EQ(c.code, 0) << c.out;
    EXPECT_NE(c.out.find("cuda graph: 3 step(s) replayed"), std::string::npos) << c.out;
    EXPECT_EQ(worst_difference(plain, graphed), 0.0);
  }
}

}  // namespace
}  // namespace vitddp
