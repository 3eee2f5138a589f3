#include "framework/nn/layers.h"

#include "framework/ops/attention.h"
#include "framework/ops/dropout.h"
#include "framework/ops/gelu.h"
#include "framework/ops/layer_norm.h"
#include "framework/ops/linear.h"
#include "framework/ops/patch_embed.h"
#include "framework/ops/shape_ops.h"

namespace vitddp {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias) {
  weight_ = register_parameter("weight", Tensor::zeros({out_features, in_features}));
  if (bias) bias_ = register_parameter("bias", Tensor::zeros({out_features}));
}

Tensor Linear::forward(const Tensor& x) const {
  before_forward();
  return linear(x, weight_, bias_);
}

PatchConv::PatchConv(int64_t in_channels, int64_t out_channels, int64_t patch) : patch_(patch) {
  weight_ = register_parameter("weight", Tensor::zeros({out_channels, in_channels, patch, patch}));
  bias_ = register_parameter("bias", Tensor::zeros({out_channels}));
}

Tensor PatchConv::forward(const Tensor& images) const {
  before_forward();
  return patch_embed(images, weight_, bias_, patch_);
}

LayerNorm::LayerNorm(int64_t dim, double eps) : eps_(eps) {
  weight_ = register_parameter("weight", Tensor::full({dim}, 1.0));
  bias_ = register_parameter("bias", Tensor::zeros({dim}));
}

Tensor LayerNorm::forward(const Tensor& x) const {
  before_forward();
  return layer_norm(x, weight_, bias_, eps_);
}

AddLayerNorm LayerNorm::forward_sum(const Tensor& a, const Tensor& b) const {
  before_forward();
  return add_layer_norm(a, b, weight_, bias_, eps_);
}

MultiheadAttention::MultiheadAttention(int64_t dim, int64_t num_heads) : dim_(dim), num_heads_(num_heads) {
  VITDDP_CHECK(num_heads > 0 && dim % num_heads == 0, "MultiheadAttention: ", num_heads,
               " heads do not divide dim ", dim);
  in_proj_weight_ = register_parameter("in_proj_weight", Tensor::zeros({3 * dim, dim}));
  in_proj_bias_ = register_parameter("in_proj_bias", Tensor::zeros({3 * dim}));
  out_proj_ = &register_module("out_proj", std::make_unique<Linear>(dim, dim));
}

Tensor MultiheadAttention::forward(const Tensor& x) const {
  check_tensor(x.dim() == 3 && x.size(2) == dim_, "MultiheadAttention", "(B, N, D) with D matching", x);
  before_forward();
  Tensor qkv = linear(x, in_proj_weight_, in_proj_bias_);  // (B, N, 3D)
  return out_proj_->forward(multi_head_attention(qkv, num_heads_));
}

Mlp::Mlp(int64_t dim, int64_t hidden, double dropout, Generator* dropout_gen)
    : dropout_(dropout), dropout_gen_(dropout_gen) {
  fc1_ = &register_module("0", std::make_unique<Linear>(dim, hidden));
  fc2_ = &register_module("3", std::make_unique<Linear>(hidden, dim));
}

Tensor Mlp::forward(const Tensor& x) const {
  before_forward();
  Tensor h = gelu(fc1_->forward(x));
  if (dropout_ > 0) h = dropout(h, dropout_, is_training(), *dropout_gen_);
  Tensor y = fc2_->forward(h);
  if (dropout_ > 0) y = dropout(y, dropout_, is_training(), *dropout_gen_);
  return y;
}

}  // namespace vitddp
