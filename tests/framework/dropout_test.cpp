#include <gtest/gtest.h>

#include "common/test_utils.h"
#include "framework/ops/dropout.h"
#include "framework/ops/reduce.h"
#include "framework/ops/shape_ops.h"

namespace vitddp {
namespace {

using testing::gradcheck;
using testing::random_tensor;
using testing::throws_with;

TEST(Dropout, IdentityWhenEvalOrZeroP) {
  Generator gen(1);
  Tensor x = random_tensor({3, 4}, gen);
  const uint64_t before = gen.counter();
  EXPECT_TRUE(dropout(x, 0.5, false, gen).same_impl(x));
  EXPECT_TRUE(dropout(x, 0.0, true, gen).same_impl(x));
  EXPECT_EQ(gen.counter(), before);  // no random numbers drawn
}

TEST(Dropout, ZeroesOrScalesAndIsReproducible) {
  Generator data_gen(2);
  Tensor x = random_tensor({20, 50}, data_gen, DType::kF32, 0.5, 1.5);
  const double p = 0.3;
  Generator gen(42, 7);
  Tensor y = dropout(x, p, true, gen);
  EXPECT_EQ(gen.counter(), 7u + 1000u);  // one uniform per element
  std::vector<double> xv = x.to_vector(), yv = y.to_vector();
  int zeros = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (yv[i] == 0) {
      ++zeros;
    } else {
      EXPECT_NEAR(yv[i], xv[i] / (1 - p), 1e-6);
    }
  }
  EXPECT_NEAR(zeros / 1000.0, p, 0.05);
  // The mask is a function of the generator state: element i is dropped iff uniform #i < p.
  Generator replay(42, 7);
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_EQ(yv[i] == 0, replay.uniform() < p) << i;
  Generator again(42, 7);
  EXPECT_EQ(dropout(x, p, true, again).to_vector(), yv);
}

TEST(Dropout, GradientIsTheMask) {
  Generator data_gen(3);
  Tensor x = random_tensor({4, 6}, data_gen).set_requires_grad(true);
  // The same generator state on every call, so finite differences see one fixed mask.
  auto fn = [](const std::vector<Tensor>& in) {
    Generator gen(9);
    return dropout(transpose(in[0], 0, 1), 0.4, true, gen);
  };
  EXPECT_TRUE(gradcheck(fn, {x}));
  x.set_grad(Tensor());
  Generator gen(9);
  Tensor y = dropout(x, 0.4, true, gen);
  sum(y).backward();
  std::vector<double> g = x.grad().to_vector(), yv = y.to_vector();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], yv[i] == 0 ? 0.0 : 1 / 0.6, 1e-12);
}

TEST(Dropout, BadInputsThrow) {
  Generator gen(4);
  Tensor x = Tensor::zeros({2, 3});
  EXPECT_TRUE(throws_with([&] { dropout(x, 1.0, true, gen); }, {"dropout", "[0, 1)", "f32[2, 3]"}));
  EXPECT_TRUE(throws_with([&] { dropout(x, -0.1, true, gen); }, {"dropout", "[0, 1)"}));
  EXPECT_TRUE(throws_with([&] { dropout(x, 1.5, false, gen); }, {"dropout", "[0, 1)"}));
  EXPECT_TRUE(throws_with([&] { dropout(Tensor::zeros({2}, DType::kI64), 0.5, true, gen); }, {"dropout", "i64[2]"}));
}

}  // namespace
}  // namespace vitddp
