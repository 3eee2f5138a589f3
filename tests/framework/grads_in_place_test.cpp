// Note [Gradients in place]: with a ParamArena, weight gradients are accumulated straight into
// the arena's buffer. They must equal the gradients computed the ordinary way, accumulate
// across backward passes, and still fire every gradient-ready hook once.
#include <gtest/gtest.h>

#include "common/test_utils.h"
#include "framework/nn/param_arena.h"
#include "framework/ops/cross_entropy.h"
#include "models/vit/vit.h"

namespace vitddp {
namespace {

TEST(GradsInPlace, ArenaGradientsMatchOrdinaryOnesAndHooksFireOnce) {
  VitConfig config = vit_config_by_name("vit_tiny");
  VisionTransformer plain(config, 9), arena_model(config, 9);
  for (auto* m : {&plain, &arena_model}) {
    Generator same(5);
    for (auto& [name, p] : m->named_parameters()) fill_uniform(p, same, -0.2, 0.2);
  }
  Generator gen(6);
  Tensor images = testing::random_tensor({3, 3, 32, 32}, gen, DType::kF32);
  Tensor labels = Tensor::from_vector_i64({2, 4, 6}, {3});
  cross_entropy(plain.forward(images), labels).backward();

  NamedTensors params = arena_model.named_parameters();
  ParamArena arena(params, Device::cpu());
  std::vector<int> fired(params.size(), 0);
  for (size_t i = 0; i < params.size(); ++i)
    params[i].second.register_grad_ready_hook([&fired, i](const Tensor&) { ++fired[i]; });
  for (int pass = 1; pass <= 2; ++pass) {
    cross_entropy(arena_model.forward(images), labels).backward();
    NamedTensors ref = plain.named_parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(fired[i], pass) << params[i].first;
      Tensor expected = ref[i].second.grad().clone();
      std::vector<double> got = params[i].second.grad().to_vector(), want = expected.to_vector();
      for (size_t k = 0; k < got.size(); ++k) ASSERT_NEAR(got[k], pass * want[k], 1e-5 + 1e-4 * std::abs(want[k])) << params[i].first;
    }
  }
  // The gradients live in the arena: zeroing it zeroes them.
  arena.zero_grad();
  for (double g : params[5].second.grad().to_vector()) EXPECT_EQ(g, 0.0);
}

}  // namespace
}  // namespace vitddp
