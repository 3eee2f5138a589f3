// The reducer's unit-test setting: vit_tiny with its parameters in a CPU arena (filled with
// U(-0.2, 0.2), so every gradient flows), wired to a Reducer over a FakeGroup (the other "rank"
// contributes twice our gradient) through the gradient-ready hooks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/fake_group.h"
#include "common/test_utils.h"
#include "distributed/reducer.h"
#include "framework/nn/param_arena.h"
#include "framework/ops/cross_entropy.h"
#include "framework/optim/optimizer.h"
#include "models/vit/vit.h"

namespace vitddp::testing {

struct TinyDdp {
  VisionTransformer model{vit_config_by_name("vit_tiny"), 4};
  NamedTensors params = model.named_parameters();
  ParamArena arena{params, Device::cpu()};
  FakeGroup group;
  std::unique_ptr<Reducer> reducer;

  explicit TinyDdp(const ReducerOptions& options) {
    Generator gen(1);
    for (auto& [name, p] : params) fill_uniform(p, gen, -0.2, 0.2);
    std::vector<ReducerParam> rp;
    for (size_t i = 0; i < params.size(); ++i) rp.push_back({params[i].first, params[i].second, arena.offset_of(i)});
    reducer = std::make_unique<Reducer>(rp, arena.flat_grads(), group, make_allreduce_hook(), options);
    for (size_t i = 0; i < params.size(); ++i)
      params[i].second.register_grad_ready_hook([this, i](const Tensor&) { reducer->mark_ready(i); });
  }
  // The loss of two random images drawn from Generator(seed), labels 1 and 7.
  Tensor loss(uint64_t seed = 2) {
    Generator gen(seed);
    Tensor images = random_tensor({2, 3, 32, 32}, gen, DType::kF32);
    return cross_entropy(model.forward(images), Tensor::from_vector_i64({1, 7}, {2}));
  }
};

// Buckets of at most 40000 bytes after a first of 5000 (several for vit_tiny), launched in
// index order up to `share` of the bytes (`held` buckets after the first sent last); `rebuild`: once,
// after the first backward.
inline ReducerOptions small_bucket_options(double share = 1.0, bool rebuild = false, size_t held = 0) {
  ReducerOptions options;
  options.held_buckets = held;
  options.bucket_cap_bytes = 40000;
  options.first_bucket_cap_bytes = 5000;
  options.ready_order_share = share;
  options.rebuild_buckets = rebuild;
  return options;
}

// With an optimizer over the arena: "sgd" (momentum 0.9, weight decay 0.01) or "adamw".
struct TinyDdpWithOptimizer : TinyDdp {
  std::unique_ptr<Optimizer> optimizer;

  TinyDdpWithOptimizer(const ReducerOptions& options, const std::string& optimizer_name) : TinyDdp(options) {
    optimizer = optimizer_name == "sgd" ? make_sgd(arena, SgdConfig{0.05, 0.9, 0.01})
                                        : make_adamw(arena, AdamWConfig{0.01, 0.9, 0.999, 1e-8, 0.05});
  }
  // One plain DDP step on loss(seed): backward, finalize(), the optimizer's step().
  void plain_step(uint64_t seed) {
    arena.zero_grad();
    reducer->prepare_for_backward();
    loss(seed).backward();
    reducer->finalize();
    optimizer->step();
  }
};

}  // namespace vitddp::testing
