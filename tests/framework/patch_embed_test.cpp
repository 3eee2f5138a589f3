#include <gtest/gtest.h>

#include "common/test_utils.h"
#include "framework/ops/patch_embed.h"
#include "nn_test_helpers.h"

namespace vitddp {
namespace {

using testing::gradcheck;
using testing::noncontiguous_copy;
using testing::random_tensor;
using testing::relative_error;
using testing::throws_with;

// conv2d(kernel = stride = p) then .reshape(B, D, -1).permute(0, 2, 1), in double.
Tensor naive_patch_embed(const Tensor& img, const Tensor& w, const Tensor& b, int64_t p) {
  std::vector<double> iv = img.to_vector(), wv = w.to_vector(), bv = b.defined() ? b.to_vector() : std::vector<double>();
  const int64_t B = img.size(0), C = img.size(1), H = img.size(2), W = img.size(3), D = w.size(0);
  const int64_t nh = H / p, nw = W / p;
  std::vector<double> out(B * nh * nw * D);
  for (int64_t n = 0; n < B; ++n)
    for (int64_t d = 0; d < D; ++d)
      for (int64_t oh = 0; oh < nh; ++oh)
        for (int64_t ow = 0; ow < nw; ++ow) {
          double s = bv.empty() ? 0.0 : bv[d];
          for (int64_t c = 0; c < C; ++c)
            for (int64_t ky = 0; ky < p; ++ky)
              for (int64_t kx = 0; kx < p; ++kx)
                s += iv[((n * C + c) * H + oh * p + ky) * W + ow * p + kx] * wv[((d * C + c) * p + ky) * p + kx];
          out[(n * nh * nw + oh * nw + ow) * D + d] = s;  // conv out[n, d, oh, ow] -> (n, oh*nw+ow, d)
        }
  return Tensor::from_vector(out, {B, nh * nw, D}, DType::kF64);
}

TEST(PatchEmbed, ForwardMatchesConv) {
  Generator gen(1);
  for (DType dt : {DType::kF64, DType::kF32}) {
    Tensor img = random_tensor({2, 3, 8, 12}, gen, dt), w = random_tensor({5, 3, 4, 4}, gen, dt),
           b = random_tensor({5}, gen, dt);
    Tensor y = patch_embed(img, w, b, 4);
    EXPECT_EQ(y.shape(), (Shape{2, 6, 5}));
    EXPECT_LT(relative_error(y, naive_patch_embed(img, w, b, 4)), dt == DType::kF64 ? 1e-14 : 1e-6);
  }
  Tensor img = random_tensor({1, 3, 32, 32}, gen), w = random_tensor({16, 3, 16, 16}, gen);
  EXPECT_LT(relative_error(patch_embed(img, w, Tensor(), 16), naive_patch_embed(img, w, Tensor(), 16)), 1e-14);
}

TEST(PatchEmbed, NonContiguousInputs) {
  Generator gen(2);
  Tensor img = random_tensor({2, 3, 8, 8}, gen), w = random_tensor({4, 3, 4, 4}, gen), b = random_tensor({4}, gen);
  Tensor imgn = noncontiguous_copy(img, 2, 3), wn = noncontiguous_copy(w, 0, 1);
  ASSERT_FALSE(imgn.is_contiguous());
  EXPECT_LT(relative_error(patch_embed(imgn, wn, b, 4), naive_patch_embed(img, w, b, 4)), 1e-14);
}

TEST(PatchEmbed, GradcheckSquare) {
  Generator gen(3);
  Tensor img = random_tensor({2, 3, 8, 8}, gen).set_requires_grad(true);
  Tensor w = random_tensor({4, 3, 4, 4}, gen).set_requires_grad(true);
  Tensor b = random_tensor({4}, gen).set_requires_grad(true);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return patch_embed(in[0], in[1], in[2], 4); }, {img, w, b}));
}

TEST(PatchEmbed, GradcheckNonSquareNonContiguous) {
  Generator gen(4);
  Tensor img = noncontiguous_copy(random_tensor({2, 3, 8, 12}, gen), 1, 3).set_requires_grad(true);
  Tensor w = noncontiguous_copy(random_tensor({3, 3, 4, 4}, gen), 2, 3).set_requires_grad(true);
  Tensor b = random_tensor({3}, gen).set_requires_grad(true);
  auto fn = [](const std::vector<Tensor>& in) { return patch_embed(in[0], in[1], in[2], 4); };
  EXPECT_TRUE(gradcheck(fn, {img, w, b}));
  EXPECT_TRUE(gradcheck(fn, {img.detach(), w, b}));  // weight and bias only (the model's case)
}

TEST(PatchEmbed, RejectsBadInputs) {
  EXPECT_TRUE(throws_with(
      [] { patch_embed(Tensor::zeros({1, 3, 32, 32}), Tensor::zeros({8, 3, 7, 7}), Tensor::zeros({8}), 7); },
      {"patch_embed: patch size 7 does not divide image size 32x32"}));
  EXPECT_TRUE(throws_with(
      [] { patch_embed(Tensor::zeros({1, 3, 8, 8}), Tensor::zeros({8, 1, 4, 4}), Tensor::zeros({8}), 4); },
      {"patch_embed", "weight f32[8, 1, 4, 4]", "f32[1, 3, 8, 8]"}));
  EXPECT_TRUE(throws_with(
      [] { patch_embed(Tensor::zeros({1, 3, 8, 8}), Tensor::zeros({8, 3, 4, 4}), Tensor::zeros({7}), 4); },
      {"patch_embed", "bias f32[7]"}));
  EXPECT_TRUE(throws_with(
      [] { patch_embed(Tensor::zeros({3, 8, 8}), Tensor::zeros({8, 3, 4, 4}), Tensor::zeros({8}), 4); },
      {"patch_embed", "4-D", "f32[3, 8, 8]"}));
}

}  // namespace
}  // namespace vitddp
