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

#include "common/gpu.h"
#include "common/guarded_tensor.h"
#include "framework/autograd/node.h"
#include "framework/cuda/flash_attention_f32.h"
#include "framework/ops/attention.h"

namespace vitddp {
namespace {

// Before any device allocation: every new block is filled with 0xFF bytes (NaN).
const bool kPoisonAllocations = (setenv("VITDDP_POISON_ALLOC", "1", 1), true);

using testing::random_tensor;

constexpr int64_t kGuardElems = 4096;

struct Case {
  DType dtype;
  int64_t batch, seq_len, heads, head_dim;
  double tol;  // max |error| / max |reference|
};

std::string case_name(const Case& c) {
  std::ostringstream s;
  s << dtype_name(c.dtype) << "_B" << c.batch << "_N" << c.seq_len << "_H" << c.heads << "_d" << c.head_dim;
  return s.str();
}
void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c) << " tol " << c.tol; }

testing::Guarded guarded(const Shape& shape, DType dtype) { return testing::guarded(shape, dtype, kGuardElems); }
using testing::Guarded;
using testing::guard_intact;

// got against want, both (B, N, cols) flat, over columns [c0, c1); prints the worst element.
::testing::AssertionResult close(const std::string& what, const std::vector<double>& got,
                                 const std::vector<double>& want, int64_t cols, int64_t c0, int64_t c1, double tol) {
  double max_err = 0, ref_max = 0;
  int64_t nonfinite = 0, worst = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const int64_t c = static_cast<int64_t>(i) % cols;
    if (c < c0 || c >= c1) continue;
    if (!std::isfinite(got[i])) {
      ++nonfinite;
      continue;
    }
    const double err = std::fabs(got[i] - want[i]);
    if (err > max_err || worst < 0) max_err = err, worst = static_cast<int64_t>(i);
    ref_max = std::max(ref_max, std::fabs(want[i]));
  }
  const double rel = max_err / std::max(ref_max, 1e-3);
  std::printf("  %s: rel %.3g (max |err| %.3g, max |want| %.3g)\n", what.c_str(), rel, max_err, ref_max);
  if (nonfinite > 0)
    return ::testing::AssertionFailure() << what << ": " << nonfinite << " non-finite elements (unwritten or NaN)";
  if (!(rel < tol)) return ::testing::AssertionFailure() << what << ": rel " << rel << " >= " << tol;
  return ::testing::AssertionSuccess();
}

// The CPU's composed attention in f32 through autograd: out and dqkv.
std::pair<std::vector<double>, std::vector<double>> cpu_reference(const Tensor& qkv32, const Tensor& dout32,
                                                                  int64_t heads) {
  Tensor qkv = qkv32.clone().set_requires_grad(true);
  Tensor out = multi_head_attention(qkv, heads);
  out.backward(dout32);
  return {out.to_vector(), qkv.grad().to_vector()};
}

class FlashAttentionF32 : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    VITDDP_REQUIRE_GPU();
    ASSERT_TRUE(kPoisonAllocations);
  }
};

TEST_P(FlashAttentionF32, MatchesCpuForwardAndBackward) {
  const Case c = GetParam();
  const int64_t b = c.batch, n = c.seq_len, heads = c.heads, d = heads * c.head_dim;
  const std::string name = case_name(c);
  std::printf("%s\n", name.c_str());
  Generator gen(5000 + static_cast<uint64_t>(b * 7919 + n * 131 + heads * 17 + c.head_dim));
  // Scores of a trained layer's scale (std ~1.3).
  const Tensor qkv32 = random_tensor({b, n, 3 * d}, gen, DType::kF32, -2, 2);
  const Tensor dout32 = random_tensor({b, n, d}, gen, DType::kF32, -1, 1);
  const Tensor qkv = qkv32.to(Device::cuda(0)), dout = dout32.to(Device::cuda(0));
  ASSERT_TRUE(cuda::flash_f32_fits(qkv, heads)) << name;

  Guarded out = guarded({b, n, d}, DType::kF32), lse = guarded({b, heads, n}, DType::kF32);
  Guarded dqkv = guarded({b, n, 3 * d}, DType::kF32);
  cuda::flash_f32_forward(qkv, heads, out.view, lse.view);
  cuda::flash_f32_backward(qkv, out.view, lse.view, dout, heads, dqkv.view);
  EXPECT_TRUE(guard_intact(name + " out", out));
  EXPECT_TRUE(guard_intact(name + " lse", lse));
  EXPECT_TRUE(guard_intact(name + " dqkv", dqkv));

  const auto [o_c, g_c] = cpu_reference(qkv32, dout32, heads);
  const std::vector<double> o = out.view.to_vector(), g = dqkv.view.to_vector();
  EXPECT_TRUE(close(name + " O", o, o_c, d, 0, d, c.tol));
  EXPECT_TRUE(close(name + " dQ", g, g_c, 3 * d, 0, d, c.tol));
  EXPECT_TRUE(close(name + " dK", g, g_c, 3 * d, d, 2 * d, c.tol));
  EXPECT_TRUE(close(name + " dV", g, g_c, 3 * d, 2 * d, 3 * d, c.tol));

  // Without the log-sum-exp (evaluation's forward): the same output, bit for bit.
  Guarded out_inference = guarded({b, n, d}, DType::kF32);
  cuda::flash_f32_forward(qkv, heads, out_inference.view, Tensor());
  EXPECT_TRUE(guard_intact(name + " inference out", out_inference));
  EXPECT_EQ(out_inference.view.to_vector(), o) << name << ": the inference forward differs from training's";

  // The backward is deterministic: a second run gives the same bits.
  Tensor dqkv2 = Tensor::empty({b, n, 3 * d}, DType::kF32, Device::cuda(0));
  cuda::flash_f32_backward(qkv, out.view, lse.view, dout, heads, dqkv2);
  EXPECT_EQ(dqkv2.to_vector(), g) << name << ": two backward runs differ";
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
  Generator gen(78);
  for (auto [n, heads, head_dim, node] : {std::tuple<int64_t, int64_t, int64_t, const char*>{197, 3, 64, "FlashAttentionF32Backward"},
                                         {257, 2, 80, "FlashAttentionF32Backward"},
                                         {50, 2, 80, "FlashAttentionF32Backward"},
                                         {50, 4, 64, "MultiHeadAttentionBackward"}}) {
    const int64_t b = 2, d = heads * head_dim;
    const Tensor qkv32 = random_tensor({b, n, 3 * d}, gen, DType::kF32, -2, 2);
    const Tensor dout32 = random_tensor({b, n, d}, gen, DType::kF32, -1, 1);
    Tensor qkv = qkv32.to(Device::cuda(0)).set_requires_grad(true);
    Tensor out = multi_head_attention(qkv, heads);
    ASSERT_TRUE(out.grad_fn());
    EXPECT_EQ(out.grad_fn()->name(), node) << "N " << n << ", head dim " << head_dim;
    out.backward(dout32.to(Device::cuda(0)));
    const auto [o_c, g_c] = cpu_reference(qkv32, dout32, heads);
    const std::string name = "N" + std::to_string(n) + "_d" + std::to_string(head_dim);
    EXPECT_TRUE(close(name + " O", out.to_vector(), o_c, d, 0, d, 5e-5));
    EXPECT_TRUE(close(name + " dqkv", qkv.grad().to_vector(), g_c, 3 * d, 0, 3 * d, 5e-5));
  }
}

}  // namespace
}  // namespace vitddp
