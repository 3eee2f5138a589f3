#include <gtest/gtest.h>

#include "common/test_utils.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/reduce.h"
#include "framework/ops/shape_ops.h"

namespace vitddp {
namespace {

using testing::gradcheck;
using testing::random_tensor;
using testing::throws_with;

TEST(Sum, AllElementsToScalar) {
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor s = sum(a);
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.item(), 21);
  EXPECT_EQ(sum(transpose(a, 0, 1)).item(), 21);
  EXPECT_EQ(sum(Tensor::zeros({0, 3})).item(), 0);
  EXPECT_EQ(mean(a).shape(), Shape{});
  EXPECT_DOUBLE_EQ(mean(a).item(), 3.5);
  EXPECT_DOUBLE_EQ(mean(slice(a, 1, 1, 3)).item(), (2 + 3 + 5 + 6) / 4.0);
}

TEST(Sum, Gradcheck) {
  Generator gen(1);
  Tensor a = random_tensor({3, 4, 2}, gen).set_requires_grad(true);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return sum(in[0]); }, {a}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return mean(in[0]); }, {a}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return mean(permute(in[0], {2, 0, 1})); }, {a}));
  Tensor a2 = random_tensor({3, 4}, gen).set_requires_grad(true);
  mean(a2).backward();
  for (double g : a2.grad().to_vector()) EXPECT_DOUBLE_EQ(g, 1.0 / 12);
}

TEST(SumToShape, Values) {
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(sum_to_shape(a, {3}).to_vector(), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(sum_to_shape(a, {1, 3}).shape(), (Shape{1, 3}));
  EXPECT_EQ(sum_to_shape(a, {2, 1}).to_vector(), (std::vector<double>{6, 15}));
  EXPECT_EQ(sum_to_shape(a, {1}).to_vector(), (std::vector<double>{21}));
  EXPECT_EQ(sum_to_shape(a, {}).to_vector(), (std::vector<double>{21}));
  EXPECT_EQ(sum_to_shape(transpose(a, 0, 1), {3, 1}).to_vector(), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(sum_to_shape(a, {2, 3}).to_vector(), a.to_vector());
  // A stride-0 input (an expanded view).
  Tensor e = expand(Tensor::from_vector({1, 2}, {2, 1}), {2, 4});
  EXPECT_EQ(sum_to_shape(e, {2, 1}).to_vector(), (std::vector<double>{4, 8}));
}

TEST(SumToShape, Gradcheck) {
  Generator gen(2);
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3, 4}, {3, 1}}, {{2, 3, 4}, {4}}, {{2, 3, 4}, {2, 1, 4}}, {{2, 3}, {}}};
  for (const auto& [from, to] : cases) {
    Tensor a = random_tensor(from, gen).set_requires_grad(true);
    Shape target = to;
    EXPECT_TRUE(gradcheck([target](const std::vector<Tensor>& in) { return sum_to_shape(in[0], target); }, {a}))
        << shape_str(from) << " -> " << shape_str(to);
  }
}

TEST(Reduce, BadInputsThrow) {
  EXPECT_TRUE(throws_with([] { sum_to_shape(Tensor::zeros({2, 3}), {2}); }, {"sum_to_shape", "[2, 3]", "[2]"}));
  EXPECT_TRUE(throws_with([] { sum_to_shape(Tensor::zeros({3}), {2, 3}); }, {"sum_to_shape", "[3]", "[2, 3]"}));
  EXPECT_TRUE(throws_with([] { sum(Tensor::zeros({2}, DType::kI64)); }, {"sum", "i64[2]"}));
  EXPECT_TRUE(throws_with([] { mean(Tensor::zeros({0, 2})); }, {"mean", "f32[0, 2]"}));
}

}  // namespace
}  // namespace vitddp
