// The f32 flash attention on the packed layouts (framework/cuda/flash_attention_f32.h), forward
// and backward, for every sequence length of the ViT family (50, 197, 257, 577 tokens: /32 and
// /16 at 224, /14 at 224, /16 at 384, and 65, one past the tensor-core kernels) and every head dim
// it takes (64; 80 for ViT-H/14; 128), against the CPU's composed attention on the same inputs.
// New device memory is poisoned (NaN bytes), so an output element left unwritten fails, and each
// output is followed by guard elements it must not touch. Errors are max |got - want| over
// max |want| per output (O, dQ, dK, dV). Then multi_head_attention itself: f32 past the
// tensor-core kernels takes these kernels (Note [Which attention runs]) and its autograd gives
// the same numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/attention_reference.h"
#include "common/gpu.h"
#include "common/guarded_tensor.h"
#include "framework/autograd/node.h"
#include "framework/cuda/flash_attention_f32.h"
#include "framework/ops/attention.h"

namespace vitddp {
namespace {

// Before any device allocation: every new block is filled with 0xFF bytes (NaN).
const bool kPoisonAllocations = (setenv("VITDDP_POISON_ALLOC", "1", 1), true);

using Case = testing::AttentionCase;
using testing::case_name;

class FlashAttentionF32 : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    VITDDP_REQUIRE_GPU();
    ASSERT_TRUE(kPoisonAllocations);
  }
};

TEST_P(FlashAttentionF32, MatchesCpuForwardAndBackward) {
  const Case c = GetParam();
  const Tensor probe = Tensor::empty({c.batch, c.seq_len, 3 * c.heads * c.head_dim}, c.dtype, Device::cuda(0));
  ASSERT_TRUE(cuda::flash_f32_fits(probe, c.heads)) << case_name(c);
  testing::check_fused_attention(c, {cuda::flash_f32_forward, cuda::flash_f32_backward}, 5000);
}

INSTANTIATE_TEST_SUITE_P(
    Family, FlashAttentionF32,
    ::testing::Values(Case{DType::kF32, 2, 50, 4, 64, 1e-5},   // ViT-*/32 at 224
                      Case{DType::kF32, 2, 65, 2, 64, 1e-5},   // one past the tensor-core kernels
                      Case{DType::kF32, 3, 197, 3, 64, 1e-5},  // ViT-B/16, L/16 at 224
                      Case{DType::kF32, 2, 257, 2, 80, 1e-5},  // ViT-H/14 at 224
                      Case{DType::kF32, 1, 577, 2, 64, 1e-5},  // ViT-L/16 at 384
                      Case{DType::kF32, 2, 197, 2, 80, 1e-5},  // head dim 80 at 197
                      Case{DType::kF32, 2, 577, 2, 80, 1e-5},  // and at 577
                      Case{DType::kF32, 2, 31, 2, 128, 1e-5},  // fewer tokens than a key tile
                      Case{DType::kF32, 2, 197, 2, 128, 1e-5}),
    [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// multi_head_attention takes the flash kernels for f32 past the tensor-core kernels' 64 tokens
// (and for head dim 80 at any length) and keeps the tensor-core kernels at ViT-L/32's 50; its
// autograd matches the CPU's composed attention.
TEST(FlashAttentionF32Dispatch, MultiHeadAttentionTakesTheFlashKernelsForF32) {
  VITDDP_REQUIRE_GPU();
  testing::check_attention_dispatch(DType::kF32,
                                    {{197, 3, 64, "FlashAttentionF32Backward"},
                                     {257, 2, 80, "FlashAttentionF32Backward"},
                                     {50, 2, 80, "FlashAttentionF32Backward"},
                                     {50, 4, 64, "MultiHeadAttentionBackward"}},
                                    5e-5, 78);
}

}  // namespace
}  // namespace vitddp
