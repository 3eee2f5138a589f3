// The layers torchvision's ViT is made of, with its parameter names and shapes:
// Linear (weight (out, in), bias (out)), LayerNorm (weight, bias), MultiheadAttention
// (in_proj_weight (3D, D), in_proj_bias (3D), out_proj), Mlp (children "0" and "3").
// Initialisation is left to the model, which knows torchvision's scheme.
#pragma once

#include "framework/core/random.h"
#include "framework/nn/module.h"
#include "framework/ops/layer_norm.h"

namespace vitddp {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) const;  // (..., in) -> (..., out)
  Tensor& weight() { return weight_; }
  Tensor& bias() { return bias_; }

 private:
  Tensor weight_;
  Tensor bias_;
};

// Conv2d with kernel = stride = patch, flattened to tokens: (B, C, H, W) -> (B, Np, D), with
// torchvision's conv_proj parameter shapes: weight (D, C, p, p), bias (D).
class PatchConv : public Module {
 public:
  PatchConv(int64_t in_channels, int64_t out_channels, int64_t patch);
  Tensor forward(const Tensor& images) const;
  Tensor& weight() { return weight_; }
  Tensor& bias() { return bias_; }

 private:
  Tensor weight_;
  Tensor bias_;
  int64_t patch_;
};

// A named list of child modules (torchvision's nn.Sequential of named blocks).
class ModuleList : public Module {
 public:
  template <typename M>
  M& add(const std::string& name, std::unique_ptr<M> module) {
    return register_module(name, std::move(module));
  }
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-6);
  Tensor forward(const Tensor& x) const;  // (..., D) -> (..., D)
  // A residual stream: sum = a + b and forward(sum), in one kernel where it can (add_layer_norm).
  AddLayerNorm forward_sum(const Tensor& a, const Tensor& b) const;

 private:
  Tensor weight_;
  Tensor bias_;
  double eps_;
};

class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t dim, int64_t num_heads);
  Tensor forward(const Tensor& x) const;  // self-attention, batch first: (B, N, D) -> (B, N, D)
  Tensor& in_proj_weight() { return in_proj_weight_; }
  Tensor& in_proj_bias() { return in_proj_bias_; }
  Linear& out_proj() { return *out_proj_; }

 private:
  int64_t dim_;
  int64_t num_heads_;
  Tensor in_proj_weight_;
  Tensor in_proj_bias_;
  Linear* out_proj_;
};

// Linear -> GELU -> Dropout -> Linear -> Dropout, named "0" and "3" as in torchvision's MLPBlock.
class Mlp : public Module {
 public:
  Mlp(int64_t dim, int64_t hidden, double dropout, Generator* dropout_gen);
  Tensor forward(const Tensor& x) const;
  Linear& fc1() { return *fc1_; }
  Linear& fc2() { return *fc2_; }

 private:
  Linear* fc1_;
  Linear* fc2_;
  double dropout_;
  Generator* dropout_gen_;
};

}  // namespace vitddp
