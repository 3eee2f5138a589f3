#include "models/vit/vit.h"

#include <cmath>

#include "framework/ops/dropout.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/shape_ops.h"

namespace vitddp {
namespace {

// torch.nn.init.xavier_uniform_ for a (fan_out, fan_in) weight.
void xavier_uniform(Tensor& w, Generator& gen) {
  double bound = std::sqrt(6.0 / static_cast<double>(w.size(0) + w.size(1)));
  fill_uniform(w, gen, -bound, bound);
}

}  // namespace

EncoderBlock::EncoderBlock(const VitConfig& config, Generator* dropout_gen)
    : dropout_(config.dropout), dropout_gen_(dropout_gen) {
  ln_1_ = &register_module("ln_1", std::make_unique<LayerNorm>(config.hidden_dim, config.layer_norm_eps));
  self_attention_ =
      &register_module("self_attention", std::make_unique<MultiheadAttention>(config.hidden_dim, config.num_heads));
  ln_2_ = &register_module("ln_2", std::make_unique<LayerNorm>(config.hidden_dim, config.layer_norm_eps));
  mlp_ = &register_module("mlp", std::make_unique<Mlp>(config.hidden_dim, config.mlp_dim, config.dropout, dropout_gen));
}

Tensor EncoderBlock::forward(const Tensor& input) const {
  before_forward();
  const Residual r = forward_residual(input, ln_1_->forward(input));
  return add(r.skip, r.branch);
}

EncoderBlock::Residual EncoderBlock::forward_residual(const Tensor& input, const Tensor& normed_input) const {
  before_forward();
  Tensor x = self_attention_->forward(normed_input);
  if (dropout_ > 0) x = dropout(x, dropout_, is_training(), *dropout_gen_);
  const AddLayerNorm mid = ln_2_->forward_sum(x, input);  // x + input, and ln_2 of it
  return {mid.sum, mlp_->forward(mid.normed)};
}

Encoder::Encoder(const VitConfig& config, Generator* dropout_gen)
    : dropout_(config.dropout), dropout_gen_(dropout_gen) {
  pos_embedding_ = register_parameter("pos_embedding", Tensor::zeros({1, config.seq_length(), config.hidden_dim}));
  auto& list = register_module("layers", std::make_unique<ModuleList>());
  for (int64_t i = 0; i < config.num_layers; ++i)
    layers_.push_back(
        &list.add("encoder_layer_" + std::to_string(i), std::make_unique<EncoderBlock>(config, dropout_gen)));
  ln_ = &register_module("ln", std::make_unique<LayerNorm>(config.hidden_dim, config.layer_norm_eps));
}

Tensor Encoder::forward(const Tensor& input) const {
  before_forward();
  Tensor x = add(input, pos_embedding_);
  if (dropout_ > 0) x = dropout(x, dropout_, is_training(), *dropout_gen_);
  if (layers_.empty()) return ln_->forward(x);
  // Each block's output sum is made by the layer norm that reads it next (the next block's ln_1,
  // or ln): one kernel for both on the GPU (add_layer_norm).
  Tensor normed = layers_.front()->ln_1().forward(x);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const EncoderBlock::Residual r = layers_[i]->forward_residual(x, normed);
    const LayerNorm& next = i + 1 < layers_.size() ? layers_[i + 1]->ln_1() : *ln_;
    const AddLayerNorm out = next.forward_sum(r.skip, r.branch);
    x = out.sum;
    normed = out.normed;
  }
  return normed;
}

VisionTransformer::VisionTransformer(const VitConfig& config, uint64_t seed)
    : config_(config), dropout_gen_(std::make_unique<Generator>(mix64(seed, 0xD0D0))) {
  config.validate();
  // Registration order is torchvision's: class_token, conv_proj, encoder, heads.
  class_token_ = register_parameter("class_token", Tensor::zeros({1, 1, config.hidden_dim}));
  conv_proj_ = &register_module("conv_proj", std::make_unique<PatchConv>(config.in_channels, config.hidden_dim,
                                                                          config.patch_size));
  encoder_ = &register_module("encoder", std::make_unique<Encoder>(config, dropout_gen_.get()));
  auto& heads = register_module("heads", std::make_unique<ModuleList>());
  head_ = &heads.add("head", std::make_unique<Linear>(config.hidden_dim, config.num_classes));
  name_parameters();
  Generator gen(seed);
  initialise(gen);
}

// torchvision's VisionTransformer.__init__, MLPBlock and nn.MultiheadAttention initialisation.
void VisionTransformer::initialise(Generator& gen) {
  const double fan_in = static_cast<double>(config_.in_channels * config_.patch_size * config_.patch_size);
  fill_trunc_normal(conv_proj_->weight(), gen, 0.0, std::sqrt(1.0 / fan_in), -2.0, 2.0);
  conv_proj_->bias().zero_();
  class_token_.zero_();
  fill_normal(encoder_->pos_embedding(), gen, 0.0, 0.02);
  for (EncoderBlock* block : encoder_->layers()) {
    MultiheadAttention& attn = block->self_attention();
    xavier_uniform(attn.in_proj_weight(), gen);
    attn.in_proj_bias().zero_();
    // out_proj keeps nn.Linear's default: kaiming_uniform(a=sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    double bound = 1.0 / std::sqrt(static_cast<double>(config_.hidden_dim));
    fill_uniform(attn.out_proj().weight(), gen, -bound, bound);
    attn.out_proj().bias().zero_();
    for (Linear* fc : {&block->mlp().fc1(), &block->mlp().fc2()}) {
      xavier_uniform(fc->weight(), gen);
      fill_normal(fc->bias(), gen, 0.0, 1e-6);
    }
  }
  head_->weight().zero_();
  head_->bias().zero_();
}

Tensor VisionTransformer::forward(const Tensor& images) const {
  check_tensor(images.dim() == 4 && images.size(1) == config_.in_channels && images.size(2) == config_.image_size &&
                   images.size(3) == config_.image_size,
               "VisionTransformer", "images (B, C, H, W) matching the model's channels and image size", images);
  const int64_t b = images.size(0);
  before_forward();
  Tensor x = conv_proj_->forward(images);                                    // (B, Np, D)
  Tensor cls = expand(class_token_, {b, 1, config_.hidden_dim});              // (B, 1, D)
  x = encoder_->forward(concat({cls, x}, 1));                                 // (B, N, D)
  return head_->forward(select(x, 1, 0));                                     // (B, classes)
}

bool VisionTransformer::decays_by_default(const std::string& name, const Shape& shape) {
  if (shape.size() <= 1) return false;  // biases and layer-norm scales
  for (const std::string& skipped : no_weight_decay_names())
    if (name == skipped) return false;
  return true;
}

}  // namespace vitddp
