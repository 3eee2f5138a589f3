#include <gtest/gtest.h>

#include <cmath>

#include "common/test_utils.h"
#include "framework/ops/attention.h"
#include "nn_test_helpers.h"

namespace vitddp {
namespace {

using testing::gradcheck;
using testing::noncontiguous_copy;
using testing::random_tensor;
using testing::relative_error;
using testing::throws_with;

// softmax(q k^T / sqrt(d)) v per (b, h), in double.
Tensor naive_attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  std::vector<double> qv = q.to_vector(), kv = k.to_vector(), vv = v.to_vector();
  const int64_t BH = q.size(0) * q.size(1), N = q.size(2), d = q.size(3), M = k.size(2), dv = v.size(3);
  std::vector<double> out(BH * N * dv, 0.0);
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t i = 0; i < N; ++i) {
      std::vector<double> s(M);
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < M; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += qv[(bh * N + i) * d + c] * kv[(bh * M + j) * d + c];
        s[j] = dot / std::sqrt(static_cast<double>(d));
        mx = std::max(mx, s[j]);
      }
      for (int64_t j = 0; j < M; ++j) sum += (s[j] = std::exp(s[j] - mx));
      for (int64_t j = 0; j < M; ++j)
        for (int64_t c = 0; c < dv; ++c) out[(bh * N + i) * dv + c] += s[j] / sum * vv[(bh * M + j) * dv + c];
    }
  return Tensor::from_vector(out, {q.size(0), q.size(1), N, dv}, DType::kF64);
}

TEST(Attention, ForwardMatchesNaive) {
  Generator gen(1);
  for (DType dt : {DType::kF64, DType::kF32}) {
    Tensor q = random_tensor({2, 3, 6, 8}, gen, dt, -2, 2), k = random_tensor({2, 3, 6, 8}, gen, dt, -2, 2),
           v = random_tensor({2, 3, 6, 8}, gen, dt);
    Tensor o = scaled_dot_product_attention(q, k, v);
    EXPECT_EQ(o.shape(), (Shape{2, 3, 6, 8}));
    EXPECT_LT(relative_error(o, naive_attention(q, k, v)), dt == DType::kF64 ? 1e-14 : 1e-6);
  }
}

TEST(Attention, DifferentKeyLengthAndValueDim) {
  Generator gen(2);
  Tensor q = random_tensor({1, 2, 3, 4}, gen), k = random_tensor({1, 2, 5, 4}, gen), v = random_tensor({1, 2, 5, 6}, gen);
  Tensor o = scaled_dot_product_attention(q, k, v);
  EXPECT_EQ(o.shape(), (Shape{1, 2, 3, 6}));
  EXPECT_LT(relative_error(o, naive_attention(q, k, v)), 1e-14);
}

TEST(Attention, Gradcheck) {
  Generator gen(3);
  Tensor q = random_tensor({2, 2, 5, 4}, gen).set_requires_grad(true);
  Tensor k = random_tensor({2, 2, 5, 4}, gen).set_requires_grad(true);
  Tensor v = random_tensor({2, 2, 5, 4}, gen).set_requires_grad(true);
  auto fn = [](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2]); };
  EXPECT_TRUE(gradcheck(fn, {q, k, v}));
  // Only v, then only q and k.
  EXPECT_TRUE(gradcheck(fn, {q.detach(), k.detach(), v}));
  EXPECT_TRUE(gradcheck(fn, {q, k, v.detach()}));
}

TEST(Attention, NonContiguousGradcheck) {
  // q, k, v as head-split views of a (B, N, H, hd) layout, as the model produces them.
  Generator gen(4);
  Tensor q = noncontiguous_copy(random_tensor({2, 2, 5, 4}, gen), 1, 2).set_requires_grad(true);
  Tensor k = noncontiguous_copy(random_tensor({2, 2, 5, 4}, gen), 1, 2).set_requires_grad(true);
  Tensor v = noncontiguous_copy(random_tensor({2, 2, 5, 4}, gen), 2, 3).set_requires_grad(true);
  ASSERT_FALSE(q.is_contiguous());
  EXPECT_LT(relative_error(scaled_dot_product_attention(q, k, v), naive_attention(q, k, v)), 1e-14);
  auto fn = [](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2]); };
  EXPECT_TRUE(gradcheck(fn, {q, k, v}));
}

TEST(Attention, RejectsBadInputs) {
  EXPECT_TRUE(throws_with(
      [] { scaled_dot_product_attention(Tensor::zeros({2, 5, 4}), Tensor::zeros({2, 5, 4}), Tensor::zeros({2, 5, 4})); },
      {"scaled_dot_product_attention", "4-D", "f32[2, 5, 4]"}));
  EXPECT_TRUE(throws_with(
      [] {
        scaled_dot_product_attention(Tensor::zeros({1, 2, 5, 4}), Tensor::zeros({1, 2, 5, 3}),
                                     Tensor::zeros({1, 2, 5, 4}));
      },
      {"scaled_dot_product_attention", "q f32[1, 2, 5, 4]", "k f32[1, 2, 5, 3]"}));
  EXPECT_TRUE(throws_with(
      [] {
        scaled_dot_product_attention(Tensor::zeros({1, 2, 5, 4}), Tensor::zeros({1, 2, 5, 4}),
                                     Tensor::zeros({1, 2, 5, 4}, DType::kF64));
      },
      {"scaled_dot_product_attention", "v", "dtype"}));
}

}  // namespace
}  // namespace vitddp
