#include <gtest/gtest.h>

#include <cmath>

#include "common/test_utils.h"
#include "framework/ops/gelu.h"

namespace vitddp {
namespace {

TEST(Gelu, MatchesErfFormula) {
  Tensor x = Tensor::from_vector({-3.0, -1.0, -0.1, 0.5, 2.0}, {5}, DType::kF64);
  std::vector<double> y = gelu(x).to_vector();
  std::vector<double> xs = x.to_vector();
  for (size_t i = 0; i < xs.size(); ++i)
    EXPECT_NEAR(y[i], 0.5 * xs[i] * (1 + std::erf(xs[i] / std::sqrt(2.0))), 1e-15);
}

TEST(Gelu, Gradcheck) {
  Generator gen(7);
  Tensor x = testing::random_tensor({3, 4}, gen, DType::kF64, -3, 3).set_requires_grad(true);
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return gelu(in[0]); }, {x}));
}

TEST(Gelu, RejectsIntegers) {
  EXPECT_TRUE(testing::throws_with([] { gelu(Tensor::zeros({2}, DType::kI64)); }, {"gelu", "i64[2]"}));
}

}  // namespace
}  // namespace vitddp
