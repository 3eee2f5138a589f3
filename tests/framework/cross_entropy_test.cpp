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

// Smoothed targets as one soft row each: t' = (1 - eps) t + eps / C, loss = sum t' (lse - x).
double naive_soft_cross_entropy(const Tensor& logits, const std::vector<double>& target, double eps) {
  std::vector<double> x = logits.to_vector();
  const int64_t B = logits.size(0), C = logits.size(1);
  double total = 0;
  for (int64_t r = 0; r < B; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t i = 0; i < C; ++i) m = std::max(m, x[r * C + i]);
    for (int64_t i = 0; i < C; ++i) s += std::exp(x[r * C + i] - m);
    for (int64_t i = 0; i < C; ++i)
      total += ((1 - eps) * target[r * C + i] + eps / C) * (m + std::log(s) - x[r * C + i]);
  }
  return total / B;
}

std::vector<double> one_hot(const std::vector<int64_t>& labels, int64_t classes) {
  std::vector<double> out(labels.size() * classes, 0.0);
  for (size_t r = 0; r < labels.size(); ++r) out[r * classes + labels[r]] = 1.0;
  return out;
}

// Hard labels: the soft reference with one-hot rows and no smoothing.
double naive_cross_entropy(const Tensor& logits, const std::vector<int64_t>& labels) {
  return naive_soft_cross_entropy(logits, one_hot(labels, logits.size(1)), 0.0);
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

TEST(CrossEntropy, LabelSmoothingAndSoftTargetsMatchNaive) {
  Generator gen(5);
  const std::vector<int64_t> lv = {0, 4, 2};
  Tensor labels = Tensor::from_vector_i64(lv, {3});
  std::vector<double> soft = {0.7, 0.3, 0, 0, 0, 0, 0, 0.25, 0, 0.75, 0.1, 0.2, 0.3, 0.4, 0};
  for (double eps : {0.0, 0.1, 1.0}) {
    Tensor logits = random_tensor({3, 5}, gen, DType::kF64, -3, 3);
    EXPECT_NEAR(cross_entropy(logits, labels, eps).item(), naive_soft_cross_entropy(logits, one_hot(lv, 5), eps), 1e-13)
        << eps;
    EXPECT_NEAR(cross_entropy(logits, Tensor::from_vector(soft, {3, 5}, DType::kF64), eps).item(),
                naive_soft_cross_entropy(logits, soft, eps), 1e-13)
        << eps;
    // One-hot soft targets are the labels.
    EXPECT_NEAR(cross_entropy(logits, Tensor::from_vector(one_hot(lv, 5), {3, 5}, DType::kF64), eps).item(),
                cross_entropy(logits, labels, eps).item(), 1e-13);
  }
}

TEST(CrossEntropy, GradcheckWithLabelSmoothingAndSoftTargets) {
  Generator gen(6);
  for (double eps : {0.11, 0.5}) {
    Tensor logits = random_tensor({4, 6}, gen, DType::kF64, -2, 2).set_requires_grad(true);
    auto with_labels = [eps](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1], eps); };
    EXPECT_TRUE(gradcheck(with_labels, {logits, Tensor::from_vector_i64({5, 0, 3, 3}, {4})})) << eps;
    // Mixup's kind of target: rows summing to 1 over two classes.
    std::vector<double> soft(24, 0.0);
    for (int r = 0; r < 4; ++r) {
      soft[r * 6 + r] += 0.35;
      soft[r * 6 + (r + 2) % 6] += 0.65;
    }
    EXPECT_TRUE(gradcheck(with_labels, {logits, Tensor::from_vector(soft, {4, 6}, DType::kF64)})) << eps;
    // Rows whose mass is not 1 (the loss is linear in the target): the gradient still holds.
    EXPECT_TRUE(gradcheck(with_labels, {logits, random_tensor({4, 6}, gen, DType::kF64, 0, 1)})) << eps;
  }
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
                          {"cross_entropy", "soft targets f32[3] do not match logits f32[3, 10]"}));
  EXPECT_TRUE(throws_with([] { cross_entropy(Tensor::zeros({3, 10}), Tensor::zeros({3, 10}, DType::kF64)); },
                          {"cross_entropy", "target must be i64 labels or soft targets", "f64[3, 10]"}));
  EXPECT_TRUE(throws_with([] { cross_entropy(Tensor::zeros({3, 10}), Tensor::from_vector_i64({1, 2, 3}, {3}), 1.5); },
                          {"cross_entropy", "label smoothing must be in [0, 1]", "1.5"}));
  EXPECT_TRUE(throws_with([] { cross_entropy(Tensor::zeros({10}), Tensor::from_vector_i64({1}, {1})); },
                          {"cross_entropy", "2-D", "f32[10]"}));
}

}  // namespace
}  // namespace vitddp
