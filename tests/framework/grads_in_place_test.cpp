// Note [Gradients in place]: with a ParamArena, weight gradients are accumulated straight into
// the arena's buffer. They must equal the gradients computed the ordinary way, accumulate
// across backward passes, and still fire every gradient-ready hook once.
#include <gtest/gtest.h>

#include <initializer_list>

#include "common/test_utils.h"
#include "framework/nn/param_arena.h"
#include "framework/ops/cross_entropy.h"
#include "framework/ops/reduce.h"
#include "models/vit/vit.h"

namespace vitddp {
namespace {

// The same weights in every model (small, so that no activation saturates).
void fill_alike(std::initializer_list<VisionTransformer*> models) {
  for (VisionTransformer* m : models) {
    Generator same(5);
    for (auto& [name, p] : m->named_parameters()) fill_uniform(p, same, -0.2, 0.2);
  }
}

TEST(GradsInPlace, ArenaGradientsMatchOrdinaryOnesAndHooksFireOnce) {
  VitConfig config = vit_config_by_name("vit_tiny");
  VisionTransformer plain(config, 9), arena_model(config, 9);
  fill_alike({&plain, &arena_model});
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

// Between steps the arena marks gradients stale instead of zeroing them: a step's gradients are
// then bit for bit those of a zeroed arena (the first write overwrites, later ones add), even
// after a step that left other values in the buffer.
TEST(GradsInPlace, StaleGradientsAreOverwrittenBitForBit) {
  VitConfig config = vit_config_by_name("vit_tiny");
  VisionTransformer zeroed_model(config, 9), stale_model(config, 9);
  fill_alike({&zeroed_model, &stale_model});
  NamedTensors zp = zeroed_model.named_parameters(), sp = stale_model.named_parameters();
  ParamArena zeroed(zp, Device::cpu()), stale(sp, Device::cpu());
  Generator gen(7);
  for (int step = 0; step < 3; ++step) {
    Tensor images = testing::random_tensor({3, 3, 32, 32}, gen, DType::kF32);
    Tensor labels = Tensor::from_vector_i64({1, 3, 5}, {3});
    zeroed.zero_grad();
    stale.mark_grads_stale();
    for (int micro = 0; micro < 2; ++micro) {  // two backward passes: the second adds
      cross_entropy(zeroed_model.forward(images), labels).backward();
      cross_entropy(stale_model.forward(images), labels).backward();
      stale.zero_stale_grads();
    }
    EXPECT_EQ(stale.flat_grads().to_vector(), zeroed.flat_grads().to_vector()) << "step " << step;
  }
}

// A parameter no gradient reaches keeps last step's values until zero_stale_grads, which zeroes
// it and leaves the others as backward wrote them.
TEST(GradsInPlace, AParameterNoGradientReachedIsZeroedAfterBackward) {
  VitConfig config = vit_config_by_name("vit_tiny");
  VisionTransformer model(config, 9);
  NamedTensors params = model.named_parameters();
  ParamArena arena(params, Device::cpu());
  Generator gen(8);
  Tensor images = testing::random_tensor({2, 3, 32, 32}, gen, DType::kF32);
  Tensor labels = Tensor::from_vector_i64({0, 1}, {2});
  cross_entropy(model.forward(images), labels).backward();  // every gradient now nonzero somewhere
  arena.mark_grads_stale();
  // Only the head's bias gets a gradient this time.
  Tensor head_bias;
  for (auto& [name, p] : params)
    if (name == "heads.head.bias") head_bias = p;
  ASSERT_TRUE(head_bias.defined());
  sum(head_bias).backward();
  arena.zero_stale_grads();
  for (auto& [name, p] : params) {
    std::vector<double> g = p.grad().to_vector();
    if (name == "heads.head.bias") {
      for (double v : g) EXPECT_EQ(v, 1.0) << name;  // overwritten, not added to last step's
    } else {
      for (double v : g) ASSERT_EQ(v, 0.0) << name;
    }
  }
}

}  // namespace
}  // namespace vitddp
