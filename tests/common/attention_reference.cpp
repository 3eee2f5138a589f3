#include "common/attention_reference.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "common/guarded_tensor.h"
#include "common/test_utils.h"
#include "framework/autograd/node.h"
#include "framework/ops/attention.h"

namespace vitddp::testing {

std::string case_name(const AttentionCase& c) {
  std::ostringstream s;
  s << dtype_name(c.dtype) << "_B" << c.batch << "_N" << c.seq_len << "_H" << c.heads << "_d" << c.head_dim;
  return s.str();
}

void PrintTo(const AttentionCase& c, std::ostream* os) { *os << case_name(c) << " tol " << c.tol; }

::testing::AssertionResult close_columns(const std::string& what, const std::vector<double>& got,
                                         const std::vector<double>& want, int64_t cols, int64_t c0, int64_t c1,
                                         double tol) {
  double max_err = 0, ref_max = 0;
  int64_t nonfinite = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const int64_t c = static_cast<int64_t>(i) % cols;
    if (c < c0 || c >= c1) continue;
    if (!std::isfinite(got[i])) {
      ++nonfinite;
      continue;
    }
    max_err = std::max(max_err, std::fabs(got[i] - want[i]));
    ref_max = std::max(ref_max, std::fabs(want[i]));
  }
  const double rel = max_err / std::max(ref_max, 1e-3);
  std::printf("  %s: rel %.3g (max |err| %.3g, max |want| %.3g)\n", what.c_str(), rel, max_err, ref_max);
  if (nonfinite > 0)
    return ::testing::AssertionFailure() << what << ": " << nonfinite << " non-finite elements (unwritten or NaN)";
  if (!(rel < tol)) return ::testing::AssertionFailure() << what << ": rel " << rel << " >= " << tol;
  return ::testing::AssertionSuccess();
}

std::pair<std::vector<double>, std::vector<double>> cpu_attention_reference(const Tensor& qkv32, const Tensor& dout32,
                                                                            int64_t heads) {
  Tensor qkv = qkv32.clone().set_requires_grad(true);
  Tensor out = multi_head_attention(qkv, heads);
  out.backward(dout32);
  return {out.to_vector(), qkv.grad().to_vector()};
}

void check_fused_attention(const AttentionCase& c, const FusedAttention& kernels, uint64_t seed) {
  constexpr int64_t kGuardElems = 4096;
  const int64_t b = c.batch, n = c.seq_len, heads = c.heads, d = heads * c.head_dim;
  const std::string name = case_name(c);
  std::printf("%s\n", name.c_str());
  Generator gen(seed + static_cast<uint64_t>(b * 7919 + n * 131 + heads * 17 + c.head_dim));
  // Scores of a trained layer's scale (std ~1.3), rounded to the kernel's type for every path.
  const Tensor qkv32 = random_tensor({b, n, 3 * d}, gen, DType::kF32, -2, 2).to(c.dtype).to(DType::kF32);
  const Tensor dout32 = random_tensor({b, n, d}, gen, DType::kF32, -1, 1).to(c.dtype).to(DType::kF32);
  const Tensor qkv = qkv32.to(c.dtype).to(Device::cuda(0)), dout = dout32.to(c.dtype).to(Device::cuda(0));

  Guarded out = guarded({b, n, d}, c.dtype, kGuardElems), lse = guarded({b, heads, n}, DType::kF32, kGuardElems);
  Guarded dqkv = guarded({b, n, 3 * d}, c.dtype, kGuardElems);
  kernels.forward(qkv, heads, out.view, lse.view);
  kernels.backward(qkv, out.view, lse.view, dout, heads, dqkv.view);
  EXPECT_TRUE(guard_intact(name + " out", out));
  EXPECT_TRUE(guard_intact(name + " lse", lse));
  EXPECT_TRUE(guard_intact(name + " dqkv", dqkv));

  const auto [o_c, g_c] = cpu_attention_reference(qkv32, dout32, heads);
  const std::vector<double> o = out.view.to_vector(), g = dqkv.view.to_vector();
  EXPECT_TRUE(close_columns(name + " O", o, o_c, d, 0, d, c.tol));
  EXPECT_TRUE(close_columns(name + " dQ", g, g_c, 3 * d, 0, d, c.tol));
  EXPECT_TRUE(close_columns(name + " dK", g, g_c, 3 * d, d, 2 * d, c.tol));
  EXPECT_TRUE(close_columns(name + " dV", g, g_c, 3 * d, 2 * d, 3 * d, c.tol));

  // Without the log-sum-exp (evaluation's forward): the same output, bit for bit.
  Guarded out_inference = guarded({b, n, d}, c.dtype, kGuardElems);
  kernels.forward(qkv, heads, out_inference.view, Tensor());
  EXPECT_TRUE(guard_intact(name + " inference out", out_inference));
  EXPECT_EQ(out_inference.view.to_vector(), o) << name << ": the inference forward differs from training's";

  // The backward is deterministic: a second run gives the same bits.
  Tensor dqkv2 = Tensor::empty({b, n, 3 * d}, c.dtype, Device::cuda(0));
  kernels.backward(qkv, out.view, lse.view, dout, heads, dqkv2);
  EXPECT_EQ(dqkv2.to_vector(), g) << name << ": two backward runs differ";
}

void check_attention_dispatch(DType dtype, const std::vector<DispatchCase>& cases, double tol, uint64_t seed) {
  Generator gen(seed);
  for (const DispatchCase& k : cases) {
    const int64_t b = 2, d = k.heads * k.head_dim;
    const std::string name = "N" + std::to_string(k.seq_len) + "_d" + std::to_string(k.head_dim);
    const Tensor qkv32 = random_tensor({b, k.seq_len, 3 * d}, gen, DType::kF32, -2, 2).to(dtype).to(DType::kF32);
    const Tensor dout32 = random_tensor({b, k.seq_len, d}, gen, DType::kF32, -1, 1).to(dtype).to(DType::kF32);
    Tensor qkv = qkv32.to(dtype).to(Device::cuda(0)).set_requires_grad(true);
    Tensor out = multi_head_attention(qkv, k.heads);
    ASSERT_TRUE(out.grad_fn()) << name;
    EXPECT_EQ(out.grad_fn()->name(), k.backward_node) << name;
    out.backward(dout32.to(dtype).to(Device::cuda(0)));
    const auto [o_c, g_c] = cpu_attention_reference(qkv32, dout32, k.heads);
    EXPECT_TRUE(close_columns(name + " O", out.to_vector(), o_c, d, 0, d, tol));
    EXPECT_TRUE(close_columns(name + " dqkv", qkv.grad().to_vector(), g_c, 3 * d, 0, 3 * d, tol));
  }
}

}  // namespace vitddp::testing
