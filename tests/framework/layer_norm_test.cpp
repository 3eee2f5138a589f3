#include <gtest/gtest.h>

#include <cmath>

#include "common/test_utils.h"
#include "framework/autograd/node.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/layer_norm.h"
#include "framework/ops/reduce.h"
#include "nn_test_helpers.h"

namespace vitddp {
namespace {

using testing::gradcheck;
using testing::noncontiguous_copy;
using testing::random_tensor;
using testing::relative_error;
using testing::throws_with;

std::vector<double> naive_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  std::vector<double> xv = x.to_vector(), wv = w.to_vector(), bv = b.to_vector();
  const int64_t D = w.numel(), rows = x.numel() / D;
  std::vector<double> y(xv.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < D; ++i) mean += xv[r * D + i];
    mean /= D;
    for (int64_t i = 0; i < D; ++i) var += (xv[r * D + i] - mean) * (xv[r * D + i] - mean);
    var /= D;
    for (int64_t i = 0; i < D; ++i) y[r * D + i] = (xv[r * D + i] - mean) / std::sqrt(var + eps) * wv[i] + bv[i];
  }
  return y;
}

TEST(LayerNorm, ForwardMatchesNaive) {
  Generator gen(1);
  Tensor x = random_tensor({2, 3, 8}, gen, DType::kF64, -2, 2);
  Tensor w = random_tensor({8}, gen), b = random_tensor({8}, gen);
  Tensor y = layer_norm(x, w, b, 1e-6);
  EXPECT_EQ(y.shape(), x.shape());
  EXPECT_LT(relative_error(y, Tensor::from_vector(naive_layer_norm(x, w, b, 1e-6), x.shape(), DType::kF64)), 1e-14);
}

TEST(LayerNorm, F32IsAccurateWithLargeMean) {
  // Rows with a large common offset: a one-pass E[x^2] - E[x]^2 in f32 would lose the variance.
  Generator gen(2);
  Tensor x64 = random_tensor({4, 192}, gen, DType::kF64, 1000.0, 1001.0);
  Tensor w64 = random_tensor({192}, gen), b64 = random_tensor({192}, gen);
  Tensor x = x64.to(DType::kF32), w = w64.to(DType::kF32), b = b64.to(DType::kF32);
  Tensor y = layer_norm(x, w, b, 1e-6);
  EXPECT_EQ(y.dtype(), DType::kF32);
  // Reference from the f32-rounded inputs, in double.
  Tensor ref = Tensor::from_vector(naive_layer_norm(x, w, b, 1e-6), x.shape(), DType::kF64);
  EXPECT_LT(relative_error(y, ref), 1e-6);
}

TEST(LayerNorm, NonContiguousInput) {
  Generator gen(3);
  Tensor x = random_tensor({5, 6}, gen), w = random_tensor({6}, gen), b = random_tensor({6}, gen);
  Tensor xn = noncontiguous_copy(x);
  ASSERT_FALSE(xn.is_contiguous());
  EXPECT_LT(relative_error(layer_norm(xn, w, b, 1e-5), layer_norm(x, w, b, 1e-5)), 1e-15);
}

TEST(LayerNorm, Gradcheck) {
  Generator gen(4);
  Tensor x = random_tensor({2, 3, 5}, gen, DType::kF64, -2, 2).set_requires_grad(true);
  Tensor w = random_tensor({5}, gen).set_requires_grad(true);
  Tensor b = random_tensor({5}, gen).set_requires_grad(true);
  auto fn = [](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2], 1e-5); };
  EXPECT_TRUE(gradcheck(fn, {x, w, b}));
  Tensor xn = noncontiguous_copy(random_tensor({4, 6}, gen, DType::kF64, -2, 2)).set_requires_grad(true);
  Tensor w2 = random_tensor({6}, gen), b2 = random_tensor({6}, gen).set_requires_grad(true);
  EXPECT_TRUE(gradcheck(fn, {xn, w2, b2}));
}

TEST(LayerNorm, RejectsBadInputs) {
  EXPECT_TRUE(throws_with([] { layer_norm(Tensor::zeros({2, 5}), Tensor::zeros({4}), Tensor::zeros({5}), 1e-6); },
                          {"layer_norm", "weight f32[4]", "f32[2, 5]"}));
  EXPECT_TRUE(throws_with([] { layer_norm(Tensor::zeros({2, 5}), Tensor::zeros({5}), Tensor::zeros({5, 1}), 1e-6); },
                          {"layer_norm", "bias f32[5, 1]", "f32[2, 5]"}));
  EXPECT_TRUE(throws_with(
      [] { layer_norm(Tensor::zeros({2, 5}), Tensor::zeros({5}, DType::kF64), Tensor::zeros({5}), 1e-6); },
      {"layer_norm", "weight", "dtype"}));
  EXPECT_TRUE(throws_with([] { layer_norm(Tensor::zeros({2, 5}), Tensor(), Tensor::zeros({5}), 1e-6); },
                          {"layer_norm", "weight", "undefined"}));
}


// A residual stream (y = x + layer_norm(x) as an encoder block reads it): the layer norm's
// backward adds the skip's gradient in its own pass (Note [Sums in the producing kernel]);
// x's gradient is the same as with the two gradients summed apart, bit for bit in f32.
TEST(LayerNorm, ResidualGradientSummedInTheBackwardPass) {
  Generator gen(8);
  Tensor x0 = random_tensor({6, 48}, gen, DType::kF32, -2, 2);
  Tensor w = random_tensor({48}, gen).to(DType::kF32), b = random_tensor({48}, gen).to(DType::kF32);
  Tensor up = random_tensor({6, 48}, gen).to(DType::kF32), skip = random_tensor({6, 48}, gen).to(DType::kF32);
  // Fused: the skip's add is recorded after the layer norm, so its gradient is pending when the
  // layer norm's backward runs.
  Tensor x = x0.detach().clone().set_requires_grad(true);
  Tensor branch = mul(layer_norm(x, w, b, 1e-5), up);  // apart: argument order is unspecified
  Tensor y = add(branch, mul(x, skip));
  sum(y).backward();
  // Apart: the layer norm's gradient alone, then the skip's added by hand.
  Tensor xa = x0.detach().clone().set_requires_grad(true);
  sum(mul(layer_norm(xa, w, b, 1e-5), up)).backward();
  const std::vector<double> ln = xa.grad().to_vector(), sk = skip.to_vector();
  std::vector<double> want(ln.size());
  for (size_t i = 0; i < ln.size(); ++i) want[i] = static_cast<float>(static_cast<float>(ln[i]) + static_cast<float>(sk[i]));
  EXPECT_EQ(x.grad().to_vector(), want);
}


// add_layer_norm on the CPU is add, then layer_norm: their values and their graph (the add's
// node first, so that the layer norm's backward can sum the skip's gradient).
TEST(LayerNorm, AddLayerNormIsAddThenLayerNorm) {
  Generator gen(9);
  Tensor a = random_tensor({3, 4, 16}, gen, DType::kF32).set_requires_grad(true);
  Tensor b = random_tensor({3, 4, 16}, gen, DType::kF32).set_requires_grad(true);
  Tensor w = random_tensor({16}, gen).to(DType::kF32), bias = random_tensor({16}, gen).to(DType::kF32);
  const AddLayerNorm r = add_layer_norm(a, b, w, bias, 1e-5);
  Tensor sum = add(a, b);
  EXPECT_EQ(r.sum.to_vector(), sum.to_vector());
  EXPECT_EQ(r.normed.to_vector(), layer_norm(sum, w, bias, 1e-5).to_vector());
  ASSERT_TRUE(r.sum.grad_fn() && r.normed.grad_fn());
  EXPECT_EQ(r.sum.grad_fn()->name(), "AddBackward");
  EXPECT_EQ(r.normed.grad_fn()->name(), "LayerNormBackward");
  EXPECT_LT(r.sum.grad_fn()->sequence_nr(), r.normed.grad_fn()->sequence_nr());
  EXPECT_TRUE(throws_with([&] { add_layer_norm(a, b, Tensor::zeros({15}), bias, 1e-5); },
                          {"layer_norm", "weight f32[15]"}));
}

}  // namespace
}  // namespace vitddp
