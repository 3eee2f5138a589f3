// `train --gpus 2 --set update=next-forward` over NCCL (Note [Updates in the next forward]): the same
// weights, bit for bit, as the plain update, in fp32 and in bf16 (f32 master weights updated in
// ranges, their bf16 copy rewritten bucket by bucket in the next forward), with the first
// layers' buckets sent after backward, and with the buckets after the first held to the end
// (held-buckets). Skipped without 2 GPUs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "common/ddp_harness.h"
#include "common/multiprocess.h"
#include "common/train_process.h"
#include "framework/io/safetensors.h"

namespace vitddp {
namespace {

TEST(NextForwardUpdateGpu, GivesTheWeightsOfThePlainUpdate) {
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  testing::TempFolder dir("vitddp_uif_gpu");
  // Products chosen by cuBLASLt's heuristic, not by timing: the same in both runs.
  const std::string base = "--gpus 2 --set timeout=60 --model vit_tiny --data gpu --batch-size 32 --steps 4 "
                           "--print-every 0 --bucket-mb 0.05 --momentum 0.9 --set gemm-autotune=false "
                           "--set update=after-backward --set transport=nccl";
  for (auto [precision, held] : {std::pair<const char*, int>{"fp32", 0}, {"bf16", 0}, {"bf16", 2}}) {
    SCOPED_TRACE(std::string(precision) + ", held " + std::to_string(held));
    const std::string args = base + " --precision " + precision;
    const std::string plain = (dir / "plain.safetensors").string(), deferred = (dir / "deferred.safetensors").string();
    testing::TrainOutcome a = testing::run_train("", args + " --save " + plain, true, 300);
    ASSERT_EQ(a.code, 0) << a.out;
    testing::TrainOutcome b = testing::run_train(
        "", args + " --set update=next-forward --set ready-order-share=0.4 --set held-buckets=" + std::to_string(held) + " --save " +
                deferred,
        true, 300);
    ASSERT_EQ(b.code, 0) << b.out;
    EXPECT_NE(b.out.find("updates in the next forward, "), std::string::npos) << b.out;
    // vit_tiny at 0.05 MB makes 4 buckets: 2 in ready order, none between, the 2 held last.
    if (held > 0)
      EXPECT_NE(b.out.find(", 2 buckets launched in ready order, the 2 held buckets last"), std::string::npos) << b.out;
    const SafetensorsFile x = read_safetensors(plain), y = read_safetensors(deferred);
    ASSERT_EQ(x.tensors.size(), y.tensors.size());
    for (size_t i = 0; i < x.tensors.size(); ++i) {
      const std::vector<double> u = x.tensors[i].second.to_vector(), v = y.tensors[i].second.to_vector();
      double worst = 0;
      for (size_t k = 0; k < u.size(); ++k) worst = std::max(worst, std::abs(u[k] - v[k]));
      EXPECT_EQ(worst, 0.0) << x.tensors[i].first;
    }
  }
}

}  // namespace
}  // namespace vitddp
