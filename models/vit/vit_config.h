// ViT configurations: torchvision's named models, a tiny one for tests and CPUs, and
// validation of explicit dims.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vitddp {

struct VitConfig {
  std::string name = "custom";
  int64_t image_size = 224;
  int64_t patch_size = 32;
  int64_t num_layers = 24;
  int64_t num_heads = 16;
  int64_t hidden_dim = 1024;
  int64_t mlp_dim = 4096;
  int64_t num_classes = 1000;
  int64_t in_channels = 3;
  double dropout = 0.0;
  double attention_dropout = 0.0;
  double layer_norm_eps = 1e-6;

  int64_t num_patches() const { return (image_size / patch_size) * (image_size / patch_size); }
  int64_t seq_length() const { return num_patches() + 1; }
  // Parameter count as torchvision's VisionTransformer has it.
  int64_t parameter_count() const;
  // FLOPs of one image's forward pass in its matrix products (2 per multiply-add: patch
  // embedding, every token's q/k/v, output and MLP products, attention's two products per head,
  // the classifier on the class token), elementwise work not counted; ViT-L/32 at 224: 30.8
  // GFLOP, as docs/performance.md counts it.
  double forward_flops_per_image() const;
  // Forward and backward (twice the forward: the input and the weight gradients): 3x forward.
  double training_flops_per_image() const { return 3.0 * forward_flops_per_image(); }
  // Throws a one-line error naming the first bad field.
  void validate() const;
};

// vit_b_16, vit_b_32, vit_l_16, vit_l_32, vit_h_14, vit_tiny. Unknown names throw, listing these.
VitConfig vit_config_by_name(const std::string& name);
std::vector<std::string> vit_config_names();

}  // namespace vitddp
