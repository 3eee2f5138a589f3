#include <gtest/gtest.h>

#include <cmath>

#include "common/test_utils.h"
#include "framework/ops/cross_entropy.h"
#include "nn_test_helpers.h"

namespace vitddp {
namespace {

using testing::gradcheck;
using testing::noncontiguous_copy;
using testing::random_tensor;
using testing::throws_with;

double naive_cross_entropy(const Tensor& logits, const std::vector<int64_t>& labels) {
  std::vector<double> x = logits.to_vector();
  const int64_t B = logits.size(0), C = logits.size(1);
  double total = 0;
  for (int64_t r = 0; r < B; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t i = 0; i < C; ++i) m = std::max(m, x[r * C + i]);
    for (int64_t i = 0; i < C; ++i) s += std::exp(x[r * C + i] - m);
    total += m + std::log(s) - x[r * C + labels[r]];
  }
  return total / B;
}

TEST(CrossEntropy, ForwardMatchesNaive) {
  Generator gen(1);
  std::vector<int64_t> lv = {0, 4, 2, 3};
  Tensor labels = Tensor::from_vector_i64(lv, {4});
  for (DType dt : {DType::kF64, DType::kF32}) {
    Tensor logits = random_tensor({4, 5}, gen, dt, -3, 3);
    Tensor loss = cross_entropy(logits, labels);
    EXPECT_EQ(loss.shape(), Shape{});
    EXPECT_EQ(loss.dtype(), dt);
    EXPECT_NEAR(loss.item(), naive_cross_entropy(logits, lv), dt == DType::kF64 ? 1e-14 : 1e-6);
  }
}

TEST(CrossEntropy, StableForLargeLogits) {
  Tensor logits = Tensor::from_vector({1000, 0, -1000, 2000}, {2, 2});
  Tensor loss = cross_entropy(logits, Tensor::from_vector_i64({1, 0}, {2}));
  EXPECT_NEAR(loss.item(), (1000.0 + 3000.0) / 2, 1e-3);
}

TEST(CrossEntropy, Gradcheck) {
  Generator gen(2);
  Tensor logits = random_tensor({4, 6}, gen, DType::kF64, -2, 2).set_requires_grad(true);
  Tensor labels = Tensor::from_vector_i64({5, 0, 3, 3}, {4});
  auto fn = [](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1]); };
  EXPECT_TRUE(gradcheck(fn, {logits, labels}));
  Tensor logits_nc = noncontiguous_copy(random_tensor({3, 5}, gen, DType::kF64, -2, 2)).set_requires_grad(true);
  EXPECT_TRUE(gradcheck(fn, {logits_nc, Tensor::from_vector_i64({1, 4, 0}, {3})}));
}

TEST(CrossEntropy, BackwardIsSoftmaxMinusOnehotOverB) {
  Tensor logits = Tensor::from_vector({0, 0, 0, 0}, {2, 2}, DType::kF64).set_requires_grad(true);
  cross_entropy(logits, Tensor::from_vector_i64({0, 1}, {2})).backward();
  std::vector<double> g = logits.grad().to_vector();
  EXPECT_NEAR(g[0], -0.25, 1e-15);
  EXPECT_NEAR(g[1], 0.25, 1e-15);
  EXPECT_NEAR(g[2], 0.25, 1e-15);
  EXPECT_NEAR(g[3], -0.25, 1e-15);
}

TEST(CrossEntropy, RejectsBadInputs) {
  EXPECT_TRUE(throws_with([] { cross_entropy(Tensor::zeros({3, 10}), Tensor::from_vector_i64({1, 12, 2}, {3})); },
                          {"cross_entropy", "label 12 at position 1", "[0, 10)"}));
  EXPECT_TRUE(throws_with([] { cross_entropy(Tensor::zeros({3, 10}), Tensor::from_vector_i64({-1, 0, 2}, {3})); },
                          {"cross_entropy", "label -1 at position 0"}));
  EXPECT_TRUE(throws_with([] { cross_entropy(Tensor::zeros({3, 10}), Tensor::from_vector_i64({1, 2}, {2})); },
                          {"cross_entropy", "labels i64[2]", "logits f32[3, 10]"}));
  EXPECT_TRUE(throws_with([] { cross_entropy(Tensor::zeros({3, 10}), Tensor::zeros({3})); },
                          {"cross_entropy", "labels must be i64", "f32[3]"}));
  EXPECT_TRUE(throws_with([] { cross_entropy(Tensor::zeros({10}), Tensor::from_vector_i64({1}, {1})); },
                          {"cross_entropy", "2-D", "f32[10]"}));
}

}  // namespace
}  // namespace vitddp
