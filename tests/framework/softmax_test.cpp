#include <gtest/gtest.h>

#include <cmath>

#include "common/test_utils.h"
#include "framework/ops/softmax.h"
#include "nn_test_helpers.h"

namespace vitddp {
namespace {

using testing::gradcheck;
using testing::noncontiguous_copy;
using testing::random_tensor;
using testing::relative_error;
using testing::throws_with;

Tensor naive_softmax(const Tensor& x) {
  std::vector<double> v = x.to_vector();
  const int64_t C = x.shape().back(), rows = x.numel() / C;
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t i = 0; i < C; ++i) m = std::max(m, v[r * C + i]);
    for (int64_t i = 0; i < C; ++i) s += std::exp(v[r * C + i] - m);
    for (int64_t i = 0; i < C; ++i) v[r * C + i] = std::exp(v[r * C + i] - m) / s;
  }
  return Tensor::from_vector(v, x.shape(), DType::kF64);
}

TEST(Softmax, ForwardMatchesNaive) {
  Generator gen(1);
  for (DType dt : {DType::kF64, DType::kF32}) {
    Tensor x = random_tensor({2, 3, 7}, gen, dt, -4, 4);
    Tensor y = softmax(x);
    EXPECT_EQ(y.shape(), x.shape());
    EXPECT_LT(relative_error(y, naive_softmax(x)), dt == DType::kF64 ? 1e-14 : 1e-6);
  }
}

TEST(Softmax, StableForLargeValues) {
  Tensor x = Tensor::from_vector({1000, 1001, 1002, -1000, -1001, -1002}, {2, 3});
  std::vector<double> y = softmax(x).to_vector();
  for (double v : y) EXPECT_TRUE(std::isfinite(v));
  EXPECT_NEAR(y[2], 0.6652409557748219, 1e-6);
  EXPECT_NEAR(y[3], 0.6652409557748219, 1e-6);
}

TEST(Softmax, NonContiguousAndGradcheck) {
  Generator gen(2);
  Tensor x = noncontiguous_copy(random_tensor({4, 5}, gen, DType::kF64, -2, 2)).set_requires_grad(true);
  ASSERT_FALSE(x.is_contiguous());
  EXPECT_LT(relative_error(softmax(x), naive_softmax(x)), 1e-14);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return softmax(in[0]); }, {x}));
  Tensor x3 = random_tensor({2, 3, 4}, gen, DType::kF64, -2, 2).set_requires_grad(true);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return softmax(in[0]); }, {x3}));
}

TEST(Softmax, RejectsIntegers) {
  EXPECT_TRUE(throws_with([] { softmax(Tensor::zeros({2, 3}, DType::kI64)); }, {"softmax", "i64[2, 3]"}));
}

}  // namespace
}  // namespace vitddp
