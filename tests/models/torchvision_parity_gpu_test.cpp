// Golden test on the GPU: the loss and every gradient of ViT-L/32 (50 tokens: the tensor-core
// attention) and ViT-B/16 (197 tokens: the f32 flash attention), computed by vitddp's CUDA
// backend in strict fp32, against torchvision on the same weights and batch (fp32, TF32 off),
// within 1e-4 relative. Needs a python3 with numpy, torch and torchvision (found at configure time: see
// common/parity_python.h); skips without one.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/gpu.h"
#include "common/parity_python.h"
#include "framework/cuda/context.h"
#include "framework/io/safetensors.h"
#include "framework/nn/param_arena.h"
#include "framework/ops/cross_entropy.h"
#include "models/vit/vit.h"

namespace vitddp {
namespace {

void expect_torchvision_gradients(const std::string& model_name, int64_t batch) {
  cuda::set_matmul_precision(cuda::MatmulPrecision::kFp32);
  const VitConfig config = vit_config_by_name(model_name);
  VisionTransformer model(config, 21);
  Generator gen(77);
  // torchvision's init zeroes the head, which would zero most gradients: give it values.
  NamedTensors params = model.named_parameters();
  for (auto& [name, p] : params)
    if (name.rfind("heads.head", 0) == 0 || name == "class_token") fill_normal(p, gen, 0.0, 0.02);
  Tensor images = Tensor::empty({batch, 3, config.image_size, config.image_size});
  fill_normal(images, gen, 0.0, 1.0);
  std::vector<int64_t> label_values;
  for (int64_t i = 0; i < batch; ++i) label_values.push_back(static_cast<int64_t>(gen.next_u64() % config.num_classes));
  Tensor labels = Tensor::from_vector_i64(label_values, {batch});

  ParamArena arena(params, Device::cuda(0));
  Tensor loss = cross_entropy(model.forward(images.to(Device::cuda(0))), labels.to(Device::cuda(0)));
  loss.backward();

  NamedTensors dump{{"images", images}, {"labels", labels}, {"loss", loss.detach().to(Device::cpu()).view_as_shape({1})}};
  for (auto& [name, p] : params) {
    dump.emplace_back("param." + name, p.detach().to(Device::cpu()));
    dump.emplace_back("grad." + name, p.grad().to(Device::cpu()));
  }
  std::map<std::string, std::string> meta{
      {"image_size", std::to_string(config.image_size)}, {"patch_size", std::to_string(config.patch_size)},
      {"num_layers", std::to_string(config.num_layers)}, {"num_heads", std::to_string(config.num_heads)},
      {"hidden_dim", std::to_string(config.hidden_dim)}, {"mlp_dim", std::to_string(config.mlp_dim)},
      {"num_classes", std::to_string(config.num_classes)}};
  std::string path =
      (std::filesystem::temp_directory_path() / ("vitddp_parity_" + model_name + ".safetensors")).string();
  write_safetensors(path, dump, meta);
  dump.clear();
  const std::string out = testing::run_parity_script("torchvision_parity.py", path + " --rtol 1e-4 --device cuda");
  std::filesystem::remove(path);
  std::cout << out;
  EXPECT_EQ(out.rfind("OK\n", 0), 0u) << model_name << ": " << out;
}

TEST(TorchvisionParityGpu, VitL32Fp32LossAndEveryGradient) {
  VITDDP_REQUIRE_GPU();
  VITDDP_REQUIRE_PARITY_PYTHON();
  expect_torchvision_gradients("vit_l_32", 8);
}

TEST(TorchvisionParityGpu, VitB16Fp32LossAndEveryGradient) {
  VITDDP_REQUIRE_GPU();
  VITDDP_REQUIRE_PARITY_PYTHON();
  expect_torchvision_gradients("vit_b_16", 4);
}

}  // namespace
}  // namespace vitddp
