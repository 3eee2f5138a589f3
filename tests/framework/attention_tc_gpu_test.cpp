// The tensor-core attention kernels (bf16/f16, head_dim 64, N <= 64) forward and backward,
// against (a) the f32 SIMT fused kernel and (b) the CPU's composed attention, both on the same
// inputs rounded to the 16-bit type. New device memory is poisoned (NaN bytes) so unwritten
// outputs fail, and every output is followed by guard elements that padded rows must not touch.
// Errors are max |got - want| over max |want|, per output (O, dQ, dK, dV); each comparison
// prints its worst element. The f32 kernels (one TF32 product under MatmulPrecision::kTf32,
// three, 3xTF32, under strict fp32) are checked against the f32 SIMT kernel. The ViT-L/32 shape
// (B 32, N 50, 16 heads) is among the cases in every dtype and precision. Timings are not tests:
// the kernels' speed is measured by the training benchmarks, not here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/gpu.h"
#include "common/guarded_tensor.h"
#include "framework/cuda/context.h"
#include "framework/cuda/multi_head_attention.h"
#include "framework/ops/attention.h"

namespace vitddp {
namespace {

// Before any device allocation: every new block is filled with 0xFF bytes (NaN).
const bool kPoisonAllocations = (setenv("VITDDP_POISON_ALLOC", "1", 1), true);

using cuda::MhaKernel;
using testing::random_tensor;

constexpr int64_t kHeadDim = 64;
constexpr int64_t kGuardRows = 64;

struct Case {
  DType dtype;
  int64_t batch, seq_len, heads;
  double tol;  // max |error| / max |reference|
  // f32 only: kTf32 (one TF32 product per product) or kFp32 (3xTF32).
  cuda::MatmulPrecision f32_products = cuda::MatmulPrecision::kTf32;
};

std::string case_name(const Case& c) {
  std::ostringstream s;
  s << dtype_name(c.dtype) << "_B" << c.batch << "_N" << c.seq_len << "_H" << c.heads;
  if (c.dtype == DType::kF32) s << (c.f32_products == cuda::MatmulPrecision::kTf32 ? "_tf32" : "_3xtf32");
  return s.str();
}
void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c) << " tol " << c.tol; }

// Room for 64 more rows past each output, as far as a padded row of the last (batch, head)
// could reach.
testing::Guarded guarded(const Shape& shape, DType dtype) { return testing::guarded(shape, dtype, kGuardRows * shape.back()); }
using testing::Guarded;
using testing::guard_intact;

// Checks got against want (both (B, N, C) as flat vectors) over columns [c0, c1); prints the
// worst element either way.
::testing::AssertionResult close(const std::string& what, const std::vector<double>& got,
                                 const std::vector<double>& want, int64_t seq_len, int64_t cols, int64_t c0,
                                 int64_t c1, double tol) {
  double max_err = 0, ref_max = 0;
  int64_t worst = -1, nonfinite = 0, first_nonfinite = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const int64_t c = static_cast<int64_t>(i) % cols;
    if (c < c0 || c >= c1) continue;
    if (!std::isfinite(got[i])) {
      if (nonfinite++ == 0) first_nonfinite = static_cast<int64_t>(i);
      continue;
    }
    const double err = std::fabs(got[i] - want[i]);
    if (err > max_err || worst < 0) max_err = err, worst = static_cast<int64_t>(i);
    ref_max = std::max(ref_max, std::fabs(want[i]));
  }
  auto at = [&](int64_t i) {
    std::ostringstream s;
    s << "[b " << i / cols / seq_len << ", n " << (i / cols) % seq_len << ", c " << i % cols << "]";
    return s.str();
  };
  // A floor on the scale: with one token dQ and dK are exactly 0.
  const double rel = max_err / std::max(ref_max, 1e-3);
  std::ostringstream line;
  line << what << ": rel " << rel << " (max |err| " << max_err;
  if (worst >= 0) line << " at " << at(worst) << ": got " << got[worst] << ", want " << want[worst];
  line << "; max |want| " << ref_max << ")";
  std::printf("  %s\n", line.str().c_str());
  if (nonfinite > 0)
    return ::testing::AssertionFailure() << what << ": " << nonfinite << " non-finite elements (unwritten or NaN), first at "
                                         << at(first_nonfinite) << " = " << got[first_nonfinite];
  if (!(rel < tol)) return ::testing::AssertionFailure() << line.str() << " >= " << tol;
  return ::testing::AssertionSuccess();
}

class AttentionTensorCores : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    VITDDP_REQUIRE_GPU();
    ASSERT_TRUE(kPoisonAllocations);
  }
};

// (a) and (b) for out and dqkv; the default (kAuto) choice is checked to be the tensor-core
// kernel, bit for bit.
TEST_P(AttentionTensorCores, MatchesSimtF32AndCpu) {
  const Case c = GetParam();
  const int64_t b = c.batch, n = c.seq_len, heads = c.heads, d = heads * kHeadDim;
  const std::string name = case_name(c);
  std::printf("%s\n", name.c_str());
  Generator gen(1000 + static_cast<uint64_t>(b * 7919 + n * 131 + heads));
  // Inputs of the scale of a trained layer's q, k, v (scores of std ~1.3), rounded to the
  // 16-bit type so every path sees the same values.
  const Tensor qkv32 = random_tensor({b, n, 3 * d}, gen, DType::kF32, -2, 2).to(c.dtype).to(DType::kF32);
  const Tensor dout32 = random_tensor({b, n, d}, gen, DType::kF32, -1, 1).to(c.dtype).to(DType::kF32);

  // Tensor cores, 16-bit.
  const Tensor qkv_h = qkv32.to(c.dtype).to(Device::cuda(0)), dout_h = dout32.to(c.dtype).to(Device::cuda(0));
  Guarded out_tc = guarded({b, n, d}, c.dtype), dqkv_tc = guarded({b, n, 3 * d}, c.dtype);
  cuda::mha_forward(qkv_h, heads, out_tc.view, MhaKernel::kTensorCore);
  cuda::mha_backward(qkv_h, dout_h, heads, dqkv_tc.view, MhaKernel::kTensorCore);
  EXPECT_TRUE(guard_intact(name + " out", out_tc));
  EXPECT_TRUE(guard_intact(name + " dqkv", dqkv_tc));

  // (a) The SIMT kernels in f32.
  const Tensor qkv_f = qkv32.to(Device::cuda(0)), dout_f = dout32.to(Device::cuda(0));
  Tensor out_f = Tensor::empty({b, n, d}, DType::kF32, Device::cuda(0));
  Tensor dqkv_f = Tensor::empty({b, n, 3 * d}, DType::kF32, Device::cuda(0));
  cuda::mha_forward(qkv_f, heads, out_f, MhaKernel::kSimt);
  cuda::mha_backward(qkv_f, dout_f, heads, dqkv_f, MhaKernel::kSimt);

  // (b) The CPU's composed attention in f32, through autograd.
  Tensor qkv_c = qkv32.clone().set_requires_grad(true);
  Tensor out_c = multi_head_attention(qkv_c, heads);
  out_c.backward(dout32);
  const Tensor dqkv_c = qkv_c.grad();
  ASSERT_TRUE(dqkv_c.defined());

  const std::vector<double> o_tc = out_tc.view.to_vector(), g_tc = dqkv_tc.view.to_vector();
  const std::vector<double> o_f = out_f.to_vector(), g_f = dqkv_f.to_vector();
  const std::vector<double> o_c = out_c.to_vector(), g_c = dqkv_c.to_vector();
  struct Ref {
    const char* label;
    const std::vector<double>& out;
    const std::vector<double>& dqkv;
  };
  for (const Ref& ref : {Ref{"SIMT f32", o_f, g_f}, Ref{"CPU f32", o_c, g_c}}) {
    const std::string vs = std::string(" vs ") + ref.label;
    EXPECT_TRUE(close("O" + vs, o_tc, ref.out, n, d, 0, d, c.tol));
    EXPECT_TRUE(close("dQ" + vs, g_tc, ref.dqkv, n, 3 * d, 0, d, c.tol));
    EXPECT_TRUE(close("dK" + vs, g_tc, ref.dqkv, n, 3 * d, d, 2 * d, c.tol));
    EXPECT_TRUE(close("dV" + vs, g_tc, ref.dqkv, n, 3 * d, 2 * d, 3 * d, c.tol));
  }
  // The two references agree, so a failure above points at the tensor-core kernels.
  EXPECT_TRUE(close("O SIMT f32 vs CPU f32", o_f, o_c, n, d, 0, d, 1e-4));
  EXPECT_TRUE(close("dqkv SIMT f32 vs CPU f32", g_f, g_c, n, 3 * d, 0, 3 * d, 1e-4));

  // The default choice for this dtype and shape is the tensor-core kernel.
  Tensor out_auto = Tensor::empty({b, n, d}, c.dtype, Device::cuda(0));
  Tensor dqkv_auto = Tensor::empty({b, n, 3 * d}, c.dtype, Device::cuda(0));
  cuda::mha_forward(qkv_h, heads, out_auto);
  cuda::mha_backward(qkv_h, dout_h, heads, dqkv_auto);
  EXPECT_EQ(out_auto.to_vector(), o_tc) << name << ": kAuto forward differs from kTensorCore";
  EXPECT_EQ(dqkv_auto.to_vector(), g_tc) << name << ": kAuto backward differs from kTensorCore";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionTensorCores,
    ::testing::Values(Case{DType::kBF16, 32, 50, 16, 2e-2},  // ViT-L/32
                      Case{DType::kBF16, 2, 64, 2, 2e-2},    // a full tile
                      Case{DType::kBF16, 3, 17, 4, 2e-2},    // padding inside a warp's rows
                      Case{DType::kBF16, 1, 1, 1, 2e-2},     // one token: three idle warps
                      Case{DType::kF16, 32, 50, 16, 5e-3}, Case{DType::kF16, 3, 17, 4, 5e-3}),
    [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

TEST(AttentionTensorCoresDispatch, OtherShapesAreNotTensorCore) {
  VITDDP_REQUIRE_GPU();
  Generator gen(5);
  // f32 over 65 tokens named explicitly for the tensor-core kernel is a clear error.
  Tensor qkv_f = random_tensor({2, 65, 3 * 128}, gen, DType::kF32).to(Device::cuda(0));
  Tensor out_f = Tensor::empty({2, 65, 128}, DType::kF32, Device::cuda(0));
  EXPECT_TRUE(testing::throws_with([&] { cuda::mha_forward(qkv_f, 2, out_f, MhaKernel::kTensorCore); },
                                   {"tensor-core", "f32[2, 65, 384]", "2 heads"}));
  // bf16 with head_dim 32 or 65 tokens keeps the SIMT kernels under kAuto and is an error under kTensorCore.
  for (auto [n, heads] : {std::pair<int64_t, int64_t>{10, 4}, {65, 2}}) {
    Tensor qkv = random_tensor({2, n, 3 * 128}, gen, DType::kF32).to(DType::kBF16).to(Device::cuda(0));
    Tensor out = Tensor::empty({2, n, 128}, DType::kBF16, Device::cuda(0));
    EXPECT_TRUE(testing::throws_with([&] { cuda::mha_forward(qkv, heads, out, MhaKernel::kTensorCore); },
                                     {"tensor-core", "bf16"}));
    Tensor out_simt = Tensor::empty({2, n, 128}, DType::kBF16, Device::cuda(0));
    cuda::mha_forward(qkv, heads, out, MhaKernel::kAuto);
    cuda::mha_forward(qkv, heads, out_simt, MhaKernel::kSimt);
    EXPECT_EQ(out.to_vector(), out_simt.to_vector()) << "N " << n << ", " << heads << " heads";
  }
}

// Sets the matrix-product precision for a scope and restores strict fp32 after.
class ScopedMatmulPrecision {
 public:
  explicit ScopedMatmulPrecision(cuda::MatmulPrecision p) { cuda::set_matmul_precision(p); }
  ~ScopedMatmulPrecision() { cuda::set_matmul_precision(cuda::MatmulPrecision::kFp32); }
  ScopedMatmulPrecision(const ScopedMatmulPrecision&) = delete;
  ScopedMatmulPrecision& operator=(const ScopedMatmulPrecision&) = delete;
};

class AttentionTf32 : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    VITDDP_REQUIRE_GPU();
    ASSERT_TRUE(kPoisonAllocations);
  }
};

// f32: the m16n8k8 kernels against the SIMT f32 kernels on the same inputs, every output
// element written, nothing past the outputs; kAuto picks them, bit for bit. Under TF32 matmul
// precision one TF32 product (10 mantissa bits, so tol 5e-3); under strict fp32 three (3xTF32),
// held to 2e-5, which one TF32 product would miss by far.
TEST_P(AttentionTf32, MatchesSimtF32) {
  const Case c = GetParam();
  ASSERT_EQ(c.dtype, DType::kF32);
  const int64_t b = c.batch, n = c.seq_len, heads = c.heads, d = heads * kHeadDim;
  const std::string name = case_name(c);
  std::printf("%s\n", name.c_str());
  ScopedMatmulPrecision precision(c.f32_products);
  Generator gen(2000 + static_cast<uint64_t>(b * 7919 + n * 131 + heads));
  const Tensor qkv = random_tensor({b, n, 3 * d}, gen, DType::kF32, -2, 2).to(Device::cuda(0));
  const Tensor dout = random_tensor({b, n, d}, gen, DType::kF32, -1, 1).to(Device::cuda(0));

  Guarded out_tc = guarded({b, n, d}, DType::kF32), dqkv_tc = guarded({b, n, 3 * d}, DType::kF32);
  cuda::mha_forward(qkv, heads, out_tc.view, MhaKernel::kTensorCore);
  cuda::mha_backward(qkv, dout, heads, dqkv_tc.view, MhaKernel::kTensorCore);
  EXPECT_TRUE(guard_intact(name + " out", out_tc));
  EXPECT_TRUE(guard_intact(name + " dqkv", dqkv_tc));

  Tensor out_f = Tensor::empty({b, n, d}, DType::kF32, Device::cuda(0));
  Tensor dqkv_f = Tensor::empty({b, n, 3 * d}, DType::kF32, Device::cuda(0));
  cuda::mha_forward(qkv, heads, out_f, MhaKernel::kSimt);
  cuda::mha_backward(qkv, dout, heads, dqkv_f, MhaKernel::kSimt);

  const std::vector<double> o_tc = out_tc.view.to_vector(), g_tc = dqkv_tc.view.to_vector();
  const std::vector<double> o_f = out_f.to_vector(), g_f = dqkv_f.to_vector();
  EXPECT_TRUE(close("O vs SIMT f32", o_tc, o_f, n, d, 0, d, c.tol));
  EXPECT_TRUE(close("dQ vs SIMT f32", g_tc, g_f, n, 3 * d, 0, d, c.tol));
  EXPECT_TRUE(close("dK vs SIMT f32", g_tc, g_f, n, 3 * d, d, 2 * d, c.tol));
  EXPECT_TRUE(close("dV vs SIMT f32", g_tc, g_f, n, 3 * d, 2 * d, 3 * d, c.tol));

  Tensor out_auto = Tensor::empty({b, n, d}, DType::kF32, Device::cuda(0));
  Tensor dqkv_auto = Tensor::empty({b, n, 3 * d}, DType::kF32, Device::cuda(0));
  cuda::mha_forward(qkv, heads, out_auto);
  cuda::mha_backward(qkv, dout, heads, dqkv_auto);
  EXPECT_EQ(out_auto.to_vector(), o_tc) << name << ": kAuto forward differs from kTensorCore";
  EXPECT_EQ(dqkv_auto.to_vector(), g_tc) << name << ": kAuto backward differs from kTensorCore";
}

constexpr cuda::MatmulPrecision k3xTf32 = cuda::MatmulPrecision::kFp32;
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTf32,
                         ::testing::Values(Case{DType::kF32, 32, 50, 16, 5e-3},  // ViT-L/32
                                           Case{DType::kF32, 3, 17, 4, 5e-3},    // padding inside a warp's rows
                                           Case{DType::kF32, 32, 50, 16, 2e-5, k3xTf32},
                                           Case{DType::kF32, 3, 17, 4, 2e-5, k3xTf32},
                                           // A full tile; and 5 tokens: one row block, and the
                                           // second column half of every row all padding keys.
                                           Case{DType::kF32, 2, 64, 2, 2e-5, k3xTf32},
                                           Case{DType::kF32, 2, 5, 3, 2e-5, k3xTf32},
                                           Case{DType::kF32, 2, 5, 3, 5e-3}),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// f32 attention takes the tensor cores in both precisions: kAuto is kTensorCore bit for bit and
// differs from kSimt, and strict fp32's three TF32 products differ from TF32's one.
TEST(AttentionTensorCoresDispatch, F32UsesTensorCoresInBothPrecisions) {
  VITDDP_REQUIRE_GPU();
  Generator gen(9);
  for (auto [b, n, heads] : {std::tuple<int64_t, int64_t, int64_t>{32, 50, 16}, {3, 17, 4}}) {
    SCOPED_TRACE(std::to_string(b) + " x " + std::to_string(n) + ", " + std::to_string(heads) + " heads");
    const int64_t d = heads * kHeadDim;
    const Tensor qkv = random_tensor({b, n, 3 * d}, gen, DType::kF32, -2, 2).to(Device::cuda(0));
    const Tensor dout = random_tensor({b, n, d}, gen, DType::kF32, -1, 1).to(Device::cuda(0));
    auto run = [&](MhaKernel kernel) {
      Tensor out = Tensor::empty({b, n, d}, DType::kF32, Device::cuda(0));
      Tensor dqkv = Tensor::empty({b, n, 3 * d}, DType::kF32, Device::cuda(0));
      cuda::mha_forward(qkv, heads, out, kernel);
      cuda::mha_backward(qkv, dout, heads, dqkv, kernel);
      return std::make_pair(out.to_vector(), dqkv.to_vector());
    };
    std::pair<std::vector<double>, std::vector<double>> by_precision[2];
    const cuda::MatmulPrecision precisions[2] = {cuda::MatmulPrecision::kFp32, cuda::MatmulPrecision::kTf32};
    for (int i = 0; i < 2; ++i) {
      ScopedMatmulPrecision precision(precisions[i]);
      const auto simt = run(MhaKernel::kSimt), automatic = run(MhaKernel::kAuto), tc = run(MhaKernel::kTensorCore);
      EXPECT_EQ(automatic, tc) << "precision " << i << ": kAuto is not the tensor-core kernel";
      EXPECT_NE(automatic.first, simt.first) << "precision " << i << ": kAuto forward is the SIMT kernel";
      EXPECT_NE(automatic.second, simt.second) << "precision " << i << ": kAuto backward is the SIMT kernel";
      by_precision[i] = automatic;
    }
    EXPECT_NE(by_precision[0].first, by_precision[1].first) << "3xTF32 and TF32 forward are the same";
    EXPECT_NE(by_precision[0].second, by_precision[1].second) << "3xTF32 and TF32 backward are the same";
  }
}

}  // namespace
}  // namespace vitddp
