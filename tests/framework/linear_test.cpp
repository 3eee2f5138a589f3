#include <gtest/gtest.h>

#include "common/test_utils.h"
#include "framework/ops/linear.h"
#include "nn_test_helpers.h"

namespace vitddp {
namespace {

using testing::gradcheck;
using testing::noncontiguous_copy;
using testing::random_tensor;
using testing::relative_error;
using testing::throws_with;

// y[r, o] = sum_i x[r, i] w[o, i] + b[o], in double.
std::vector<double> naive_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  std::vector<double> xv = x.to_vector(), wv = w.to_vector(), bv = b.defined() ? b.to_vector() : std::vector<double>();
  const int64_t out = w.size(0), in = w.size(1), rows = x.numel() / in;
  std::vector<double> y(rows * out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = bv.empty() ? 0.0 : bv[o];
      for (int64_t i = 0; i < in; ++i) s += xv[r * in + i] * wv[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

// c[n, m, k] = sum_j a[n, m, j] b[n or 0, j, k], in double.
std::vector<double> naive_matmul(const Tensor& a, const Tensor& b) {
  std::vector<double> av = a.to_vector(), bv = b.to_vector();
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1), batch = a.numel() / (M * K);
  const bool shared = b.dim() == 2;
  std::vector<double> c(batch * M * N);
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < N; ++k) {
        double s = 0;
        for (int64_t j = 0; j < K; ++j) s += av[(n * M + m) * K + j] * bv[((shared ? 0 : n) * K + j) * N + k];
        c[(n * M + m) * N + k] = s;
      }
  return c;
}

Tensor vec(const std::vector<double>& v, const Shape& s) { return Tensor::from_vector(v, s, DType::kF64); }

TEST(Linear, ForwardMatchesNaive) {
  Generator gen(1);
  for (DType dt : {DType::kF64, DType::kF32}) {
    Tensor x = random_tensor({2, 3, 7}, gen, dt), w = random_tensor({5, 7}, gen, dt), b = random_tensor({5}, gen, dt);
    Tensor y = linear(x, w, b);
    EXPECT_EQ(y.shape(), (Shape{2, 3, 5}));
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_LT(relative_error(y, vec(naive_linear(x, w, b), {2, 3, 5})), dt == DType::kF64 ? 1e-14 : 1e-6);
    Tensor y0 = linear(x, w, Tensor());
    EXPECT_LT(relative_error(y0, vec(naive_linear(x, w, Tensor()), {2, 3, 5})), dt == DType::kF64 ? 1e-14 : 1e-6);
  }
}

TEST(Linear, NonContiguousInputs) {
  Generator gen(2);
  Tensor x = random_tensor({4, 6}, gen), w = random_tensor({3, 6}, gen), b = random_tensor({3}, gen);
  Tensor xn = noncontiguous_copy(x), wn = noncontiguous_copy(w);
  ASSERT_FALSE(xn.is_contiguous());
  EXPECT_LT(relative_error(linear(xn, wn, b), vec(naive_linear(x, w, b), {4, 3})), 1e-14);
}

TEST(Linear, Gradcheck3DInput) {
  Generator gen(3);
  Tensor x = random_tensor({2, 3, 4}, gen).set_requires_grad(true);
  Tensor w = random_tensor({5, 4}, gen).set_requires_grad(true);
  Tensor b = random_tensor({5}, gen).set_requires_grad(true);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, b}));
}

TEST(Linear, GradcheckWithoutBiasNonContiguous) {
  Generator gen(4);
  Tensor x = noncontiguous_copy(random_tensor({2, 3, 4}, gen), 0, 2).set_requires_grad(true);
  Tensor w = noncontiguous_copy(random_tensor({5, 4}, gen)).set_requires_grad(true);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], Tensor()); }, {x, w}));
}

TEST(Linear, GradcheckOnlySomeInputs) {
  Generator gen(5);
  Tensor x = random_tensor({3, 4}, gen);  // no grad: dx is skipped
  Tensor w = random_tensor({2, 4}, gen).set_requires_grad(true);
  Tensor b = random_tensor({2}, gen);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, b}));
  Tensor x2 = random_tensor({3, 4}, gen).set_requires_grad(true);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x2, w.detach(), b}));
}

TEST(Linear, RejectsBadInputs) {
  EXPECT_TRUE(throws_with([] { linear(Tensor::zeros({2, 5}), Tensor::zeros({4, 3}), Tensor()); },
                          {"linear: input f32[2, 5] does not match weight f32[4, 3] (in_features 3)"}));
  EXPECT_TRUE(throws_with([] { linear(Tensor::zeros({2, 3}), Tensor::zeros({4, 3}), Tensor::zeros({5})); },
                          {"linear", "bias f32[5]", "f32[4, 3]", "out_features 4"}));
  EXPECT_TRUE(throws_with([] { linear(Tensor::zeros({2, 3}), Tensor::zeros({4, 3}, DType::kF64), Tensor()); },
                          {"linear", "weight", "f64[4, 3]", "dtype", "f32[2, 3]"}));
  EXPECT_TRUE(throws_with([] { linear(Tensor::zeros({2, 3}), Tensor::zeros({3}), Tensor()); },
                          {"linear", "weight", "2-D", "f32[3]"}));
  EXPECT_TRUE(throws_with([] { linear(Tensor::zeros({2, 3}, DType::kI64), Tensor::zeros({4, 3}), Tensor()); },
                          {"linear", "i64[2, 3]"}));
}

TEST(Matmul, BatchedTwoBatchDims) {
  Generator gen(6);
  Tensor a = random_tensor({2, 3, 4, 5}, gen), b = random_tensor({2, 3, 5, 2}, gen);
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 3, 4, 2}));
  EXPECT_LT(relative_error(c, vec(naive_matmul(a, b), {2, 3, 4, 2})), 1e-14);
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a, b}));
}

TEST(Matmul, SharedRhsAndF32) {
  Generator gen(7);
  for (DType dt : {DType::kF64, DType::kF32}) {
    Tensor a = random_tensor({3, 4, 6}, gen, dt), b = random_tensor({6, 5}, gen, dt);
    EXPECT_LT(relative_error(matmul(a, b), vec(naive_matmul(a, b), {3, 4, 5})), dt == DType::kF64 ? 1e-14 : 1e-6);
  }
  Tensor a = random_tensor({2, 3, 4}, gen).set_requires_grad(true);
  Tensor b = random_tensor({4, 3}, gen).set_requires_grad(true);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a, b}));
  Tensor a2 = random_tensor({3, 4}, gen).set_requires_grad(true);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a2, b}));
}

TEST(Matmul, NonContiguousGradcheck) {
  Generator gen(8);
  Tensor a = noncontiguous_copy(random_tensor({2, 4, 3}, gen), 1, 2).set_requires_grad(true);
  Tensor b = noncontiguous_copy(random_tensor({2, 3, 5}, gen), 0, 1).set_requires_grad(true);
  ASSERT_FALSE(a.is_contiguous());
  EXPECT_LT(relative_error(matmul(a, b), vec(naive_matmul(a.contiguous(), b.contiguous()), {2, 4, 5})), 1e-14);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a, b}));
}

TEST(Matmul, RejectsBadInputs) {
  EXPECT_TRUE(throws_with([] { matmul(Tensor::zeros({2, 3, 4}), Tensor::zeros({5, 6})); },
                          {"matmul", "f32[2, 3, 4]", "f32[5, 6]"}));
  EXPECT_TRUE(throws_with([] { matmul(Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 4, 5})); },
                          {"matmul", "batch dims", "f32[2, 3, 4]", "f32[3, 4, 5]"}));
  EXPECT_TRUE(throws_with([] { matmul(Tensor::zeros({3, 4}), Tensor::zeros({2, 4, 5})); }, {"matmul", "batch dims"}));
  EXPECT_TRUE(throws_with([] { matmul(Tensor::zeros({4}), Tensor::zeros({4, 5})); }, {"matmul", "f32[4]", "2 dims"}));
  EXPECT_TRUE(throws_with([] { matmul(Tensor::zeros({3, 4}), Tensor::zeros({4, 5}, DType::kF64)); },
                          {"matmul", "dtype", "f64[4, 5]"}));
}

}  // namespace
}  // namespace vitddp
