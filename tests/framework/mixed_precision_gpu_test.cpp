// bf16 mixed precision on the GPU: the arena's f32 master weights, their bf16 copy, bf16
// gradients, and the fused optimizer that updates the master and rewrites the copy.
#include <gtest/gtest.h>

#include "common/gpu.h"
#include "framework/nn/param_arena.h"
#include "framework/ops/cast.h"
#include "framework/ops/cross_entropy.h"
#include "framework/optim/optimizer.h"
#include "models/vit/vit.h"

namespace vitddp {
namespace {

TEST(MixedPrecision, SgdUpdatesMasterAndRewritesTheBf16Copy) {
  VITDDP_REQUIRE_GPU();
  Generator gen(8);
  Tensor w = testing::random_tensor({37, 5}, gen, DType::kF32).set_requires_grad(true);
  std::vector<double> start = w.to_vector();
  ParamArena arena({{"w", w}}, Device::cuda(0), DType::kBF16);
  EXPECT_EQ(w.dtype(), DType::kBF16);
  EXPECT_EQ(w.grad().dtype(), DType::kBF16);
  Tensor g = testing::random_tensor({37, 5}, gen, DType::kF32);
  w.grad().copy_(g);
  auto sgd = make_sgd(arena, SgdConfig{0.5, 0.0, 0.0});
  sgd->step();
  std::vector<double> master = arena.master_views()[0].second.to_vector();
  std::vector<double> copy = w.to_vector(), grad = g.to(DType::kBF16).to_vector();
  for (size_t i = 0; i < master.size(); ++i) {
    EXPECT_NEAR(master[i], start[i] - 0.5 * grad[i], 1e-6) << i;  // f32 master keeps full precision
    EXPECT_NEAR(copy[i], master[i], std::abs(master[i]) * 8e-3 + 1e-6) << i;  // bf16 rounding of it
  }
}

TEST(MixedPrecision, TinyVitBf16TracksTheF32Reference) {
  VITDDP_REQUIRE_GPU();
  VitConfig config = vit_config_by_name("vit_tiny");
  VisionTransformer ref(config, 3), mixed(config, 3);
  Generator gen(12);
  for (auto* model : {&ref, &mixed}) {
    Generator same(40);
    for (auto& [name, p] : model->named_parameters()) fill_normal(p, same, 0.0, 0.05);
  }
  Tensor images = testing::random_tensor({6, 3, 32, 32}, gen, DType::kF32);
  Tensor labels = Tensor::from_vector_i64({1, 3, 5, 7, 9, 0}, {6});
  Tensor loss_ref = cross_entropy(ref.forward(images), labels);
  loss_ref.backward();
  NamedTensors params = mixed.named_parameters();
  ParamArena arena(params, Device::cuda(0), DType::kBF16);
  Tensor logits = mixed.forward(images.to(Device::cuda(0)).to(DType::kBF16));
  Tensor loss = cross_entropy(cast(logits, DType::kF32), labels.to(Device::cuda(0)));
  loss.backward();
  EXPECT_NEAR(loss.item(), loss_ref.item(), 2e-2 * loss_ref.item());
  NamedTensors ref_params = ref.named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].first.rfind("heads.head.bias", 0) == 0) continue;
    EXPECT_LT(testing::relative_error(params[i].second.grad(), ref_params[i].second.grad()), 5e-2) << params[i].first;
  }
}

}  // namespace
}  // namespace vitddp
