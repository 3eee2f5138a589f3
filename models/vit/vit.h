// VisionTransformer with torchvision's structure, parameter names, registration order and
// initialisation, so weights exchange with torchvision.models.VisionTransformer by name.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/core/random.h"
#include "framework/nn/layers.h"
#include "models/vit/vit_config.h"

namespace vitddp {

// ln_1 -> self_attention -> dropout -> + input; ln_2 -> mlp -> + (torchvision's EncoderBlock).
class EncoderBlock : public Module {
 public:
  EncoderBlock(const VitConfig& config, Generator* dropout_gen);
  Tensor forward(const Tensor& x) const;  // (B, N, D) -> (B, N, D)
  // The block's output as its two residual parts, skip + branch, for a caller that adds them in
  // the next layer norm's kernel (LayerNorm::forward_sum); normed_input is ln_1(input), made by
  // the caller the same way. Encoder::forward runs the blocks so.
  struct Residual {
    Tensor skip;
    Tensor branch;
  };
  Residual forward_residual(const Tensor& input, const Tensor& normed_input) const;
  const LayerNorm& ln_1() const { return *ln_1_; }
  MultiheadAttention& self_attention() { return *self_attention_; }
  Mlp& mlp() { return *mlp_; }

 private:
  LayerNorm* ln_1_;
  MultiheadAttention* self_attention_;
  LayerNorm* ln_2_;
  Mlp* mlp_;
  double dropout_;
  Generator* dropout_gen_;
};

// encoder.pos_embedding, encoder.layers.encoder_layer_N, encoder.ln.
class Encoder : public Module {
 public:
  Encoder(const VitConfig& config, Generator* dropout_gen);
  Tensor forward(const Tensor& x) const;  // (B, N, D) -> (B, N, D)
  Tensor& pos_embedding() { return pos_embedding_; }
  std::vector<EncoderBlock*>& layers() { return layers_; }

 private:
  Tensor pos_embedding_;  // (1, N, D)
  std::vector<EncoderBlock*> layers_;
  LayerNorm* ln_;
  double dropout_;
  Generator* dropout_gen_;
};

class VisionTransformer : public Module {
 public:
  // Initialised as torchvision does, drawing from Generator(seed).
  VisionTransformer(const VitConfig& config, uint64_t seed);
  Tensor forward(const Tensor& images) const;  // (B, C, H, W) f32 -> logits (B, classes)
  const VitConfig& config() const { return config_; }
  // The generator every dropout layer draws from; its (seed, counter) go into checkpoints.
  Generator& dropout_generator() { return *dropout_gen_; }
  // Parameters besides the 1-D ones that weight decay leaves out by default (timm's
  // no_weight_decay(): the class token and the position embedding).
  static std::vector<std::string> no_weight_decay_names() { return {"class_token", "encoder.pos_embedding"}; }
  // Whether weight decay applies to `name` of `shape` by that rule.
  static bool decays_by_default(const std::string& name, const Shape& shape);

 private:
  void initialise(Generator& gen);

  VitConfig config_;
  std::unique_ptr<Generator> dropout_gen_;
  Tensor class_token_;  // (1, 1, D)
  PatchConv* conv_proj_;
  Encoder* encoder_;
  Linear* head_;  // heads.head
};

}  // namespace vitddp
