// cuDNN's fused attention on the packed layouts (framework/cuda/cudnn_attention.h), forward and
// backward, for every sequence length of the ViT family (50, 197, 257, 577 tokens: /32 and /16
// at 224, /14 at 224, /16 at 384) and both head dims (64; 80 for ViT-H/14), in bf16 and f16,
// against the CPU's composed attention on the same inputs rounded to the 16-bit type. New
// device memory is poisoned (NaN bytes), so an output element cuDNN leaves unwritten fails, and
// each output is followed by guard elements it must not touch. Errors are max |got - want| over
// max |want| per output (O, dQ, dK, dV). Then multi_head_attention itself: which path a shape
// takes (Note [Which attention runs]) and that its autograd gives the same numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "common/attention_reference.h"
#include "common/gpu.h"
#include "common/guarded_tensor.h"
#include "framework/autograd/node.h"
#include "framework/cuda/cudnn_attention.h"
#include "framework/ops/attention.h"

namespace vitddp {
namespace {

// Before any device allocation: every new block is filled with 0xFF bytes (NaN).
const bool kPoisonAllocations = (setenv("VITDDP_POISON_ALLOC", "1", 1), true);

using Case = testing::AttentionCase;
using testing::case_name;

class CudnnAttention : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    VITDDP_REQUIRE_GPU();
    ASSERT_TRUE(kPoisonAllocations);
    if (!cuda::sdpa_compiled()) GTEST_SKIP() << "this build has no cuDNN fused attention (configure found no cuDNN frontend)";
  }
};

TEST_P(CudnnAttention, MatchesCpuForwardAndBackward) {
  const Case c = GetParam();
  const Tensor probe = Tensor::empty({c.batch, c.seq_len, 3 * c.heads * c.head_dim}, c.dtype, Device::cuda(0));
  ASSERT_TRUE(cuda::sdpa_available(probe, c.heads, /*training=*/true)) << case_name(c) << ": cuDNN refused the shape";
  ASSERT_TRUE(cuda::sdpa_available(probe, c.heads, /*training=*/false)) << case_name(c);
  testing::check_fused_attention(c, {cuda::sdpa_forward, cuda::sdpa_backward}, 3000);
}

INSTANTIATE_TEST_SUITE_P(
    Family, CudnnAttention,
    ::testing::Values(Case{DType::kBF16, 2, 50, 4, 64, 2e-2},   // ViT-*/32 at 224
                      Case{DType::kBF16, 3, 197, 3, 64, 2e-2},  // ViT-B/16, L/16 at 224
                      Case{DType::kBF16, 2, 257, 2, 80, 2e-2},  // ViT-H/14 at 224
                      Case{DType::kBF16, 1, 577, 2, 64, 2e-2},  // ViT-L/16 at 384
                      Case{DType::kBF16, 2, 197, 2, 80, 2e-2},  // head dim 80 at 197
                      Case{DType::kBF16, 2, 577, 2, 80, 2e-2},  // and at 577
                      Case{DType::kBF16, 2, 65, 2, 64, 2e-2},   // one past the tensor-core kernels
                      Case{DType::kF16, 3, 197, 3, 64, 5e-3}, Case{DType::kF16, 2, 257, 2, 80, 5e-3},
                      Case{DType::kF16, 1, 577, 2, 64, 5e-3}),
    [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// multi_head_attention picks cuDNN for bf16 past the tensor-core kernels' 64 tokens and keeps
// the tensor-core kernels at ViT-L/32's 50; its autograd matches the CPU's composed attention.
TEST(CudnnAttentionDispatch, MultiHeadAttentionTakesCudnnPastSixtyFourTokens) {
  VITDDP_REQUIRE_GPU();
  if (!cuda::sdpa_compiled()) GTEST_SKIP() << "this build has no cuDNN fused attention";
  testing::check_attention_dispatch(DType::kBF16,
                                    {{197, 3, 64, "CudnnAttentionBackward"},
                                     {257, 2, 80, "CudnnAttentionBackward"},
                                     {50, 4, 64, "MultiHeadAttentionBackward"}},
                                    2e-2, 77);
}

}  // namespace
}  // namespace vitddp
