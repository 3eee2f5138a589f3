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

Tensor iota(const Shape& shape, DType dtype = DType::kF64) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return Tensor::from_vector(v, shape, dtype);
}

TEST(Reshape, ViewsContiguousAndInfers) {
  Tensor a = iota({2, 3, 4});
  Tensor r = reshape(a, {4, -1});
  EXPECT_EQ(r.shape(), (Shape{4, 6}));
  EXPECT_EQ(r.storage(), a.storage());
  EXPECT_EQ(r.to_vector(), a.to_vector());
  EXPECT_EQ(reshape(a, {-1}).shape(), (Shape{24}));
  EXPECT_EQ(reshape(reshape(a, {24}), {2, 3, 4}).shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(reshape(Tensor::full({1}, 3.0), {}).shape(), Shape{});
  // Non-contiguous input: a copy in row-major order of the permuted view.
  Tensor t = transpose(iota({2, 3}), 0, 1);  // 0 3 / 1 4 / 2 5
  Tensor rt = reshape(t, {-1});
  EXPECT_NE(rt.storage(), t.storage());
  EXPECT_EQ(rt.to_vector(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

TEST(Reshape, Gradcheck) {
  Generator gen(1);
  Tensor a = random_tensor({2, 3, 4}, gen).set_requires_grad(true);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return reshape(in[0], {3, -1, 2}); }, {a}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return reshape(permute(in[0], {2, 0, 1}), {4, -1}); },
                        {a}));
}

TEST(PermuteTranspose, ViewValues) {
  Tensor a = iota({2, 3, 4});
  Tensor p = permute(a, {2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.storage(), a.storage());
  EXPECT_FALSE(p.is_contiguous());
  std::vector<double> v = p.to_vector();
  // p[k][i][j] = a[i][j][k] = 12 i + 4 j + k
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_EQ(v[k * 6 + i * 3 + j], 12 * i + 4 * j + k);
  Tensor t = transpose(a, -1, 0);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.to_vector()[1], 12);  // t[0][0][1] = a[1][0][0]
}

TEST(PermuteTranspose, Gradcheck) {
  Generator gen(2);
  Tensor a = random_tensor({2, 3, 4}, gen).set_requires_grad(true);
  Tensor w = random_tensor({4, 2, 3}, gen);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return mul(permute(in[0], {2, 0, 1}), in[1]); },
                        {a, w}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return transpose(in[0], 1, 2); }, {a}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) { return contiguous(transpose(permute(in[0], {1, 2, 0}), 0, 2)); }, {a}));
}

TEST(Expand, StrideZeroView) {
  Tensor a = Tensor::from_vector({1, 2, 3}, {1, 1, 3});
  Tensor e = expand(a, {2, 4, -1});
  EXPECT_EQ(e.shape(), (Shape{2, 4, 3}));
  EXPECT_EQ(e.strides(), (Shape{0, 0, 1}));
  EXPECT_EQ(e.storage(), a.storage());
  EXPECT_EQ(e.to_vector()[22], 2);
  Tensor lead = expand(Tensor::from_vector({5, 6}, {2}), {3, 2});
  EXPECT_EQ(lead.to_vector(), (std::vector<double>{5, 6, 5, 6, 5, 6}));
}

TEST(Expand, Gradcheck) {
  Generator gen(3);
  Tensor cls = random_tensor({1, 1, 5}, gen).set_requires_grad(true);  // [1, 1, D] -> [B, 1, D]
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return expand(in[0], {3, 1, 5}); }, {cls}));
  EXPECT_EQ(cls.grad().shape(), (Shape{1, 1, 5}));
  Tensor b = random_tensor({3, 1}, gen).set_requires_grad(true);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return expand(in[0], {2, 3, 4}); }, {b}));
}

TEST(Concat, ValuesAndGradcheck) {
  Tensor a = iota({2, 1, 2}), b = scale(iota({2, 2, 2}), 10), c = Tensor::full({2, 1, 2}, -1, DType::kF64);
  Tensor out = concat({a, b, c}, 1);
  EXPECT_EQ(out.shape(), (Shape{2, 4, 2}));
  EXPECT_EQ(out.to_vector(), (std::vector<double>{0, 1, 0, 10, 20, 30, -1, -1, 2, 3, 40, 50, 60, 70, -1, -1}));
  EXPECT_EQ(concat({a, a}, -1).shape(), (Shape{2, 1, 4}));

  Generator gen(4);
  Tensor x = random_tensor({2, 1, 3}, gen).set_requires_grad(true);
  Tensor y = random_tensor({2, 3, 2}, gen).set_requires_grad(true);  // permuted below: [2, 2, 3]
  Tensor z = random_tensor({2, 4, 3}, gen).set_requires_grad(true);
  Tensor no_grad = random_tensor({2, 2, 3}, gen);
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) { return concat({in[0], permute(in[1], {0, 2, 1}), in[2], in[3]}, 1); },
      {x, y, z, no_grad}));
}

TEST(Select, ViewValuesAndGradcheck) {
  Tensor a = iota({2, 3, 4});
  Tensor s = select(a, 1, -1);  // a[:, 2, :]
  EXPECT_EQ(s.shape(), (Shape{2, 4}));
  EXPECT_EQ(s.storage(), a.storage());
  EXPECT_EQ(s.to_vector(), (std::vector<double>{8, 9, 10, 11, 20, 21, 22, 23}));
  EXPECT_EQ(select(select(a, 0, 1), -1, 2).to_vector(), (std::vector<double>{14, 18, 22}));
  EXPECT_EQ(select(iota({3}), 0, -3).shape(), Shape{});

  Generator gen(5);
  Tensor x = random_tensor({2, 3, 4}, gen).set_requires_grad(true);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return select(in[0], 1, -2); }, {x}));
  EXPECT_EQ(x.grad().shape(), (Shape{2, 3, 4}));
  // Only the selected entries get gradient.
  x.set_grad(Tensor());
  sum(select(x, 0, 1)).backward();
  std::vector<double> g = x.grad().to_vector();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], i < 12 ? 0.0 : 1.0) << i;
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return select(transpose(in[0], 0, 2), 0, 3); }, {x}));
}

TEST(Slice, ViewValuesAndGradcheck) {
  Tensor a = iota({3, 4});
  Tensor s = slice(a, 1, 1, 3);
  EXPECT_EQ(s.shape(), (Shape{3, 2}));
  EXPECT_EQ(s.storage(), a.storage());
  EXPECT_EQ(s.to_vector(), (std::vector<double>{1, 2, 5, 6, 9, 10}));
  EXPECT_EQ(slice(a, 0, 1, 100).shape(), (Shape{2, 4}));  // end clamped
  EXPECT_EQ(slice(a, -1, -2, 4).to_vector(), (std::vector<double>{2, 3, 6, 7, 10, 11}));
  EXPECT_EQ(slice(a, 0, 2, 2).shape(), (Shape{0, 4}));

  Generator gen(6);
  Tensor x = random_tensor({3, 5, 2}, gen).set_requires_grad(true);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return slice(in[0], 1, 1, 4); }, {x}));
  EXPECT_EQ(x.grad().shape(), (Shape{3, 5, 2}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return slice(permute(in[0], {1, 0, 2}), 0, 2, 10); },
                        {x}));
}

TEST(Contiguous, CopiesOnlyWhenNeeded) {
  Tensor a = iota({2, 3});
  EXPECT_TRUE(contiguous(a).same_impl(a));
  Tensor t = transpose(a, 0, 1);
  Tensor c = contiguous(t);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage(), a.storage());
  EXPECT_EQ(c.to_vector(), t.to_vector());
}

TEST(ShapeOps, IntegerTensorsViewToo) {
  Tensor i = Tensor::from_vector_i64({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(select(transpose(i, 0, 1), 0, 2).to_vector(), (std::vector<double>{3, 6}));
  EXPECT_EQ(concat({i, i}, 0).shape(), (Shape{4, 3}));
}

TEST(ShapeOps, BadInputsThrow) {
  Tensor a = Tensor::zeros({2, 3});
  EXPECT_TRUE(throws_with([&] { reshape(a, {4, -1}); }, {"reshape", "[2, 3]", "[4, -1]"}));
  EXPECT_TRUE(throws_with([&] { reshape(a, {-1, -1}); }, {"reshape", "[-1, -1]"}));
  EXPECT_TRUE(throws_with([&] { reshape(a, {7}); }, {"reshape", "[2, 3]", "[7]"}));
  EXPECT_TRUE(throws_with([&] { permute(a, {0, 0}); }, {"permute", "[0, 0]", "[2, 3]"}));
  EXPECT_TRUE(throws_with([&] { permute(a, {0}); }, {"permute", "[0]", "[2, 3]"}));
  EXPECT_TRUE(throws_with([&] { transpose(a, 0, 2); }, {"transpose", "[2, 3]"}));
  EXPECT_TRUE(throws_with([&] { expand(a, {2, 4}); }, {"expand", "[2, 3]", "[2, 4]"}));
  EXPECT_TRUE(throws_with([&] { expand(a, {3}); }, {"expand", "[2, 3]", "[3]"}));
  EXPECT_TRUE(throws_with([&] { expand(a, {-1, 2, 3}); }, {"expand", "[-1, 2, 3]"}));
  EXPECT_TRUE(throws_with([&] { concat({a, Tensor::zeros({3, 3})}, 1); }, {"concat", "[3, 3]", "[2, 3]"}));
  EXPECT_TRUE(throws_with([&] { concat({a, Tensor::zeros({2, 3}, DType::kF64)}, 0); },
                          {"concat", "different dtypes", "f64[2, 3]"}));
  EXPECT_TRUE(throws_with([&] { concat({}, 0); }, {"concat", "at least one"}));
  EXPECT_TRUE(throws_with([&] { concat({a, a}, 2); }, {"concat", "dim 2 out of range"}));
  EXPECT_TRUE(throws_with([&] { select(a, 1, 3); }, {"select", "index 3", "[2, 3]"}));
  EXPECT_TRUE(throws_with([&] { select(a, 0, -3); }, {"select", "index -3", "[2, 3]"}));
  EXPECT_TRUE(throws_with([&] { select(a, 2, 0); }, {"select", "dim 2"}));
  EXPECT_TRUE(throws_with([&] { slice(a, 1, 2, 1); }, {"slice", "[2, 1)", "[2, 3]"}));
  EXPECT_TRUE(throws_with([&] { slice(a, 0, 3, 4); }, {"slice", "[3, 4)", "[2, 3]"}));
}

}  // namespace
}  // namespace vitddp
