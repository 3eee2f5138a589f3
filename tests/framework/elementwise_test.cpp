#include <gtest/gtest.h>

#include "common/test_utils.h"
#include "framework/ops/cast.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/shape_ops.h"

namespace vitddp {
namespace {

using testing::gradcheck;
using testing::random_tensor;
using testing::throws_with;

TEST(Add, SameShapeAndBroadcastValues) {
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector({10, 20, 30}, {3});
  Tensor c = Tensor::from_vector({100, 200}, {2, 1});
  EXPECT_EQ(add(a, a).to_vector(), (std::vector<double>{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ(add(a, b).to_vector(), (std::vector<double>{11, 22, 33, 14, 25, 36}));
  Tensor ac = add(a, c);
  EXPECT_EQ(ac.shape(), (Shape{2, 3}));
  EXPECT_EQ(ac.to_vector(), (std::vector<double>{101, 102, 103, 204, 205, 206}));
  // [2, 1] + [3] -> [2, 3]: both broadcast.
  EXPECT_EQ(add(c, b).to_vector(), (std::vector<double>{110, 120, 130, 210, 220, 230}));
  // scalar (shape []) + tensor
  EXPECT_EQ(add(Tensor::full({}, 0.5), a).to_vector(), (std::vector<double>{1.5, 2.5, 3.5, 4.5, 5.5, 6.5}));
}

TEST(Mul, BroadcastAndNonContiguousValues) {
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, DType::kF64);
  Tensor b = Tensor::from_vector({2, 3}, {2, 1}, DType::kF64);
  EXPECT_EQ(mul(a, b).to_vector(), (std::vector<double>{2, 4, 6, 12, 15, 18}));
  Tensor at = transpose(a, 0, 1);  // [3, 2]: 1 4 / 2 5 / 3 6
  Tensor row = Tensor::from_vector({10, 100}, {2}, DType::kF64);
  EXPECT_EQ(mul(at, row).to_vector(), (std::vector<double>{10, 400, 20, 500, 30, 600}));
  EXPECT_EQ(mul(at, at).to_vector(), (std::vector<double>{1, 16, 4, 25, 9, 36}));
}

TEST(Scale, Values) {
  Tensor a = Tensor::from_vector({1, -2, 3, 4}, {2, 2});
  EXPECT_EQ(scale(a, -0.5).to_vector(), (std::vector<double>{-0.5, 1, -1.5, -2}));
  EXPECT_EQ(scale(transpose(a, 0, 1), 2).to_vector(), (std::vector<double>{2, 6, -4, 8}));
}

TEST(Add, GradcheckBroadcasting) {
  Generator gen(1);
  auto fn = [](const std::vector<Tensor>& in) { return add(in[0], in[1]); };
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3, 4}, {3, 1}}, {{1, 5, 4}, {2, 5, 4}}, {{3, 4}, {3, 4}}, {{4}, {2, 3, 1}}, {{}, {2, 3}}};
  for (const auto& [sa, sb] : cases) {
    Tensor a = random_tensor(sa, gen).set_requires_grad(true);
    Tensor b = random_tensor(sb, gen).set_requires_grad(true);
    EXPECT_TRUE(gradcheck(fn, {a, b})) << shape_str(sa) << " + " << shape_str(sb);
    EXPECT_EQ(a.grad().shape(), sa);
    EXPECT_EQ(b.grad().shape(), sb);
  }
}

TEST(Mul, GradcheckBroadcasting) {
  Generator gen(2);
  auto fn = [](const std::vector<Tensor>& in) { return mul(in[0], in[1]); };
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3, 4}, {3, 1}}, {{1, 5, 4}, {2, 5, 4}}, {{3, 4}, {3, 4}}, {{2, 1, 4}, {3, 1}}};
  for (const auto& [sa, sb] : cases) {
    Tensor a = random_tensor(sa, gen).set_requires_grad(true);
    Tensor b = random_tensor(sb, gen).set_requires_grad(true);
    EXPECT_TRUE(gradcheck(fn, {a, b})) << shape_str(sa) << " * " << shape_str(sb);
  }
}

TEST(Mul, GradcheckNonContiguousInputs) {
  Generator gen(3);
  Tensor a = random_tensor({4, 2, 3}, gen).set_requires_grad(true);
  Tensor b = random_tensor({3, 4, 1}, gen).set_requires_grad(true);
  // permute(a) is [3, 4, 2] non-contiguous; b broadcasts along the last dim.
  auto fn = [](const std::vector<Tensor>& in) { return mul(permute(in[0], {2, 0, 1}), in[1]); };
  EXPECT_TRUE(gradcheck(fn, {a, b}));
  auto fn_add = [](const std::vector<Tensor>& in) { return add(in[1], permute(in[0], {2, 0, 1})); };
  EXPECT_TRUE(gradcheck(fn_add, {a, b}));
}

TEST(Mul, OnlyOneInputRequiresGrad) {
  Generator gen(4);
  Tensor a = random_tensor({2, 3}, gen).set_requires_grad(true);
  Tensor b = random_tensor({3}, gen);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return mul(in[0], in[1]); }, {a, b}));
  EXPECT_FALSE(b.grad().defined());
}

TEST(Scale, Gradcheck) {
  Generator gen(5);
  Tensor a = random_tensor({3, 4}, gen).set_requires_grad(true);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return scale(transpose(in[0], 0, 1), -1.7); }, {a}));
}

TEST(Elementwise, Float32MatchesFloat64) {
  Generator gen(6);
  Tensor a = random_tensor({4, 5, 6}, gen);
  Tensor b = random_tensor({5, 1}, gen);
  Tensor ref = mul(add(a, b), b);
  Tensor f32 = mul(add(a.to(DType::kF32), b.to(DType::kF32)), b.to(DType::kF32));
  EXPECT_EQ(f32.dtype(), DType::kF32);
  EXPECT_LT(testing::relative_error(f32, ref), 1e-6);
}

TEST(Elementwise, BadInputsThrow) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4});
  EXPECT_TRUE(throws_with([&] { add(a, b); }, {"add: shapes [2, 3] and [4] cannot be broadcast together"}));
  EXPECT_TRUE(throws_with([&] { mul(a, Tensor::zeros({3, 3})); }, {"mul", "[2, 3]", "[3, 3]"}));
  EXPECT_TRUE(throws_with([&] { add(a, Tensor::zeros({2, 3}, DType::kF64)); },
                          {"add", "different dtypes", "f32[2, 3]", "f64[2, 3]"}));
  EXPECT_TRUE(throws_with([&] { mul(Tensor::zeros({2}, DType::kI64), Tensor::zeros({2}, DType::kI64)); },
                          {"mul", "i64[2]"}));
  EXPECT_TRUE(throws_with([&] { scale(Tensor::zeros({2}, DType::kI64), 2.0); }, {"scale", "i64[2]"}));
  EXPECT_TRUE(throws_with([&] { add(a, Tensor()); }, {"add", "undefined"}));
}

}  // namespace
}  // namespace vitddp

namespace vitddp {
namespace {

TEST(Cast, ForwardConvertsAndBackwardConvertsBack) {
  Generator gen(31);
  Tensor x = testing::random_tensor({3, 4}, gen, DType::kF64).set_requires_grad(true);
  Tensor y = cast(x, DType::kF32);
  EXPECT_EQ(y.dtype(), DType::kF32);
  EXPECT_LT(testing::relative_error(y, x), 1e-7);
  EXPECT_TRUE(cast(x, DType::kF64).same_impl(x));
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return cast(cast(in[0], DType::kF32), DType::kF64); },
                                 {x}, 1e-3, 1e-4, 1e-3));
  EXPECT_EQ(x.grad().dtype(), DType::kF64);
}

}  // namespace
}  // namespace vitddp
