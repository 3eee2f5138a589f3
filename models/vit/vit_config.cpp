#include "models/vit/vit_config.h"

#include "framework/core/error.h"

namespace vitddp {
namespace {

struct Named {
  const char* name;
  int64_t patch, layers, heads, hidden, mlp;
};
// torchvision.models.vision_transformer: vit_b_16 ... vit_h_14 at 224x224, 1000 classes.
constexpr Named kConfigs[] = {
    {"vit_b_16", 16, 12, 12, 768, 3072},  {"vit_b_32", 32, 12, 12, 768, 3072},
    {"vit_l_16", 16, 24, 16, 1024, 4096}, {"vit_l_32", 32, 24, 16, 1024, 4096},
    {"vit_h_14", 14, 32, 16, 1280, 5120},
};

}  // namespace

std::vector<std::string> vit_config_names() {
  std::vector<std::string> names;
  for (const Named& c : kConfigs) names.push_back(c.name);
  names.push_back("vit_tiny");
  return names;
}

VitConfig vit_config_by_name(const std::string& name) {
  VitConfig config;
  config.name = name;
  if (name == "vit_tiny") {
    // Small enough for CPU tests and the CPU fallback of the main job.
    config.image_size = 32;
    config.patch_size = 8;
    config.num_layers = 2;
    config.num_heads = 4;
    config.hidden_dim = 64;
    config.mlp_dim = 128;
    config.num_classes = 10;
    return config;
  }
  for (const Named& c : kConfigs) {
    if (name == c.name) {
      config.patch_size = c.patch;
      config.num_layers = c.layers;
      config.num_heads = c.heads;
      config.hidden_dim = c.hidden;
      config.mlp_dim = c.mlp;
      return config;
    }
  }
  std::string known;
  for (const std::string& n : vit_config_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown model '" + name + "' (known: " + known + ")");
}

int64_t VitConfig::parameter_count() const {
  const int64_t d = hidden_dim;
  int64_t conv = d * in_channels * patch_size * patch_size + d;
  int64_t tokens = d + seq_length() * d;                   // class_token + pos_embedding
  int64_t block = 2 * 2 * d                                // ln_1, ln_2
                  + 3 * d * d + 3 * d + d * d + d          // in_proj, out_proj
                  + mlp_dim * d + mlp_dim + d * mlp_dim + d;  // mlp.0, mlp.3
  int64_t head = num_classes * d + num_classes;
  return conv + tokens + num_layers * block + 2 * d + head;
}

double VitConfig::forward_flops_per_image() const {
  const double d = static_cast<double>(hidden_dim), tokens = static_cast<double>(seq_length());
  const double patch_embed = static_cast<double>(num_patches()) * d * in_channels * patch_size * patch_size;
  const double projections = tokens * (3 * d * d + d * d + 2 * d * mlp_dim);  // in_proj, out_proj, MLP
  const double attention = 2 * tokens * tokens * d;                            // Q K^T and P V, all heads
  const double head = d * num_classes;
  return 2.0 * (patch_embed + num_layers * (projections + attention) + head);
}

void VitConfig::validate() const {
  auto positive = [](int64_t v, const char* field) {
    VITDDP_CHECK(v > 0, "model: ", field, " must be positive, got ", v);
  };
  positive(image_size, "image-size");
  positive(patch_size, "patch-size");
  positive(num_layers, "layers");
  positive(num_heads, "heads");
  positive(hidden_dim, "hidden-dim");
  positive(mlp_dim, "mlp-dim");
  positive(num_classes, "classes");
  positive(in_channels, "channels");
  VITDDP_CHECK(image_size % patch_size == 0, "model: patch size ", patch_size, " does not divide image size ",
               image_size);
  VITDDP_CHECK(hidden_dim % num_heads == 0, "model: heads ", num_heads, " do not divide hidden dim ", hidden_dim);
  VITDDP_CHECK(dropout >= 0 && dropout < 1, "model: dropout must be in [0, 1), got ", dropout);
  VITDDP_CHECK(attention_dropout == 0.0, "model: attention dropout is not supported (torchvision's ViTs use 0)");
  VITDDP_CHECK(image_size <= 8192 && hidden_dim <= 65536 && mlp_dim <= 262144 && num_layers <= 1024 &&
                   num_classes <= 10000000,
               "model: dims out of the supported range");
}

}  // namespace vitddp
