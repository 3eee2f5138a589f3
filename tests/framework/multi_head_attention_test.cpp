#include <gtest/gtest.h>

#include "common/test_utils.h"
#include "framework/ops/attention.h"
#include "framework/ops/shape_ops.h"

namespace vitddp {
namespace {

TEST(MultiHeadAttention, EqualsPerHeadAttentionAndGradchecks) {
  Generator gen(21);
  const int64_t b = 2, n = 5, heads = 2, hd = 3, d = heads * hd;
  Tensor qkv = testing::random_tensor({b, n, 3 * d}, gen, DType::kF64).set_requires_grad(true);
  Tensor out = multi_head_attention(qkv, heads);
  ASSERT_EQ(out.shape(), (Shape{b, n, d}));
  // Head 1 of batch 1 by hand: columns [hd, 2hd) of q, k and v.
  Tensor q = slice(slice(qkv, 2, 0, d), 2, hd, 2 * hd), k = slice(slice(qkv, 2, d, 2 * d), 2, hd, 2 * hd),
         v = slice(slice(qkv, 2, 2 * d, 3 * d), 2, hd, 2 * hd);
  Tensor ref = scaled_dot_product_attention(reshape(q, {b, 1, n, hd}), reshape(k, {b, 1, n, hd}),
                                            reshape(v, {b, 1, n, hd}));
  Tensor got = slice(out, 2, hd, 2 * hd);
  EXPECT_LT(testing::relative_error(reshape(got, {b, 1, n, hd}), ref), 1e-12);
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return multi_head_attention(in[0], 2); }, {qkv}));
}

TEST(MultiHeadAttention, BadShapesAreClearErrors) {
  EXPECT_TRUE(testing::throws_with([] { multi_head_attention(Tensor::zeros({2, 5, 10}), 2); }, {"multi_head_attention", "f32[2, 5, 10]"}));
  EXPECT_TRUE(testing::throws_with([] { multi_head_attention(Tensor::zeros({2, 5, 12}), 3); }, {"3 heads do not divide dim 4"}));
}

}  // namespace
}  // namespace vitddp
