// Golden test: the project's ViT against torchvision's on the same weights and batch, in f32
// (the comparison runs in tests/python/torchvision_parity.py under a python3 with numpy, torch
// and torchvision, found at configure time; without one the parity tests skip).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "common/parity_python.h"
#include "common/test_utils.h"
#include "framework/io/safetensors.h"
#include "framework/ops/cross_entropy.h"
#include "models/vit/vit.h"

namespace vitddp {
namespace {

// Every parameter gets fresh random values (torchvision's init zeroes the head, which would
// make most gradients vanish and the test weak).
void randomise(VisionTransformer& model, Generator& gen) {
  for (auto& [name, p] : model.named_parameters()) {
    bool is_norm_scale = name.find(".ln") != std::string::npos && name.rfind(".weight") == name.size() - 7;
    fill_uniform(p, gen, is_norm_scale ? 0.8 : -0.2, is_norm_scale ? 1.2 : 0.2);
  }
}

void check_against_torchvision(const VitConfig& config, int64_t batch, const std::string& tag) {
  VisionTransformer model(config, 11);
  Generator gen(2024);
  randomise(model, gen);
  Tensor images = Tensor::empty({batch, config.in_channels, config.image_size, config.image_size});
  fill_normal(images, gen, 0.0, 1.0);
  std::vector<int64_t> label_values;
  for (int64_t i = 0; i < batch; ++i) label_values.push_back(static_cast<int64_t>(gen.next_u64() % config.num_classes));
  Tensor labels = Tensor::from_vector_i64(label_values, {batch});

  Tensor loss = cross_entropy(model.forward(images), labels);
  loss.backward();

  NamedTensors dump{{"images", images}, {"labels", labels}, {"loss", loss.detach().view_as_shape({1})}};
  for (auto& [name, p] : model.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    dump.emplace_back("param." + name, p.detach());
    dump.emplace_back("grad." + name, p.grad());
  }
  std::map<std::string, std::string> meta{{"image_size", std::to_string(config.image_size)},
                                          {"patch_size", std::to_string(config.patch_size)},
                                          {"num_layers", std::to_string(config.num_layers)},
                                          {"num_heads", std::to_string(config.num_heads)},
                                          {"hidden_dim", std::to_string(config.hidden_dim)},
                                          {"mlp_dim", std::to_string(config.mlp_dim)},
                                          {"num_classes", std::to_string(config.num_classes)}};
  std::string path = (std::filesystem::temp_directory_path() / ("vitddp_parity_" + tag + ".safetensors")).string();
  write_safetensors(path, dump, meta);
  std::string out = testing::run_parity_script("torchvision_parity.py", path + " --rtol 1e-5");
  EXPECT_EQ(out.rfind("OK\n", 0), 0u) << out;
  std::cout << out;
  std::filesystem::remove(path);
}

TEST(TorchvisionParity, TinyVitLossAndEveryGradient) {
  VITDDP_REQUIRE_PARITY_PYTHON();
  check_against_torchvision(vit_config_by_name("vit_tiny"), 4, "tiny");
}

TEST(TorchvisionParity, NonSquarePatchGridAndMoreHeads) {
  VITDDP_REQUIRE_PARITY_PYTHON();
  VitConfig c = vit_config_by_name("vit_tiny");
  c.image_size = 24;
  c.patch_size = 6;
  c.num_layers = 3;
  c.num_heads = 8;
  c.hidden_dim = 32;
  c.mlp_dim = 48;
  c.num_classes = 7;
  check_against_torchvision(c, 3, "custom");
}

TEST(VitModel, ParameterNamesOrderAndCountMatchTorchvision) {
  VisionTransformer model(vit_config_by_name("vit_tiny"), 0);
  NamedTensors params = model.named_parameters();
  ASSERT_GE(params.size(), 8u);
  EXPECT_EQ(params[0].first, "class_token");
  EXPECT_EQ(params[1].first, "conv_proj.weight");
  EXPECT_EQ(params[3].first, "encoder.pos_embedding");
  EXPECT_EQ(params[4].first, "encoder.layers.encoder_layer_0.ln_1.weight");
  EXPECT_EQ(params[6].first, "encoder.layers.encoder_layer_0.self_attention.in_proj_weight");
  EXPECT_EQ(params[8].first, "encoder.layers.encoder_layer_0.self_attention.out_proj.weight");
  EXPECT_EQ(params[12].first, "encoder.layers.encoder_layer_0.mlp.0.weight");
  EXPECT_EQ(params[14].first, "encoder.layers.encoder_layer_0.mlp.3.weight");
  EXPECT_EQ(params.back().first, "heads.head.bias");
  int64_t total = 0;
  for (auto& [name, p] : params) total += p.numel();
  EXPECT_EQ(total, model.config().parameter_count());
  // torchvision.models.vit_l_32: 306,535,400 parameters.
  EXPECT_EQ(vit_config_by_name("vit_l_32").parameter_count(), 306535400);
  EXPECT_EQ(vit_config_by_name("vit_b_16").parameter_count(), 86567656);
}

TEST(VitModel, InitialisationFollowsTorchvision) {
  VisionTransformer model(vit_config_by_name("vit_tiny"), 5);
  for (auto& [name, p] : model.named_parameters()) {
    std::vector<double> v = p.to_vector();
    double max_abs = 0;
    for (double x : v) max_abs = std::max(max_abs, std::fabs(x));
    bool is_norm_bias = name.find("ln") != std::string::npos && name.find("bias") != std::string::npos;
    if (name == "class_token" || name.rfind("heads.head", 0) == 0 || name == "conv_proj.bias" || is_norm_bias ||
        name.find("in_proj_bias") != std::string::npos || name.find("out_proj.bias") != std::string::npos) {
      EXPECT_EQ(max_abs, 0.0) << name;
    } else if (name.find("mlp") != std::string::npos && name.find("bias") != std::string::npos) {
      EXPECT_GT(max_abs, 0.0) << name;
      EXPECT_LT(max_abs, 1e-5) << name;  // normal(std=1e-6)
    } else {
      EXPECT_GT(max_abs, 0.0) << name;
    }
  }
}

TEST(VitModel, BadConfigsAreClearErrors) {
  VitConfig c = vit_config_by_name("vit_tiny");
  c.patch_size = 7;
  EXPECT_TRUE(testing::throws_with([&] { c.validate(); }, {"patch size 7 does not divide image size 32"}));
  EXPECT_TRUE(testing::throws_with([] { vit_config_by_name("vit_x"); }, {"unknown model 'vit_x'", "vit_l_32"}));
  c = vit_config_by_name("vit_tiny");
  c.num_heads = 3;
  EXPECT_TRUE(testing::throws_with([&] { c.validate(); }, {"heads 3 do not divide hidden dim 64"}));
}

}  // namespace
}  // namespace vitddp
