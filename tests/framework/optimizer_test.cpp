// SGD and AdamW over a ParamArena, against PyTorch's update rules written out in double.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_utils.h"
#include "framework/nn/param_arena.h"
#include "framework/optim/optimizer.h"

namespace vitddp {
namespace {

struct Fixture {
  Tensor a = Tensor::from_vector({0.5, -1.0, 2.0, 0.25, -0.75, 1.5}, {2, 3});
  Tensor b = Tensor::from_vector({0.1, -0.2, 0.3}, {3});
  NamedTensors params{{"a", a.set_requires_grad(true)}, {"b", b.set_requires_grad(true)}};
  std::vector<double> grads_step(int step) const {  // a deterministic gradient per step
    std::vector<double> g;
    for (int i = 0; i < 9; ++i) g.push_back(std::sin(1.0 + i + 3.0 * step));
    return g;
  }
  void set_grads(int step) {
    std::vector<double> g = grads_step(step);
    a.grad().copy_(Tensor::from_vector({g.begin(), g.begin() + 6}, {2, 3}));
    b.grad().copy_(Tensor::from_vector({g.begin() + 6, g.end()}, {3}));
  }
  std::vector<double> values() const {
    std::vector<double> v = a.to_vector(), w = b.to_vector();
    v.insert(v.end(), w.begin(), w.end());
    return v;
  }
};

TEST(Optimizer, SgdWithMomentumAndWeightDecayMatchesPytorch) {
  Fixture f;
  std::vector<double> p = f.values(), buf(9, 0.0);
  ParamArena arena(f.params, Device::cpu());
  auto opt = make_sgd(arena, SgdConfig{0.1, 0.9, 0.01});
  for (int step = 0; step < 3; ++step) {
    f.set_grads(step);
    opt->step();
    std::vector<double> g = f.grads_step(step);
    for (int i = 0; i < 9; ++i) {
      double d = g[i] + 0.01 * p[i];
      buf[i] = step == 0 ? d : 0.9 * buf[i] + d;
      p[i] -= 0.1 * buf[i];
    }
    std::vector<double> got = f.values();
    for (int i = 0; i < 9; ++i) EXPECT_NEAR(got[i], p[i], 1e-6) << "step " << step << " element " << i;
  }
  EXPECT_EQ(opt->state().size(), 1u);
}

TEST(Optimizer, PlainSgdKeepsNoState) {
  Fixture f;
  std::vector<double> p = f.values();
  ParamArena arena(f.params, Device::cpu());
  auto opt = make_sgd(arena, SgdConfig{0.5, 0.0, 0.0});
  f.set_grads(0);
  opt->step();
  std::vector<double> g = f.grads_step(0), got = f.values();
  for (int i = 0; i < 9; ++i) EXPECT_NEAR(got[i], p[i] - 0.5 * g[i], 1e-6);
  EXPECT_TRUE(opt->state().empty());
}

TEST(Optimizer, AdamWMatchesPytorch) {
  Fixture f;
  std::vector<double> p = f.values(), m(9, 0.0), v(9, 0.0);
  ParamArena arena(f.params, Device::cpu());
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.05;
  auto opt = make_adamw(arena, AdamWConfig{lr, b1, b2, eps, wd});
  for (int step = 1; step <= 3; ++step) {
    f.set_grads(step);
    opt->step();
    std::vector<double> g = f.grads_step(step);
    for (int i = 0; i < 9; ++i) {
      p[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      double mhat = m[i] / (1 - std::pow(b1, step)), denom = std::sqrt(v[i]) / std::sqrt(1 - std::pow(b2, step)) + eps;
      p[i] -= lr * mhat / denom;
    }
    std::vector<double> got = f.values();
    for (int i = 0; i < 9; ++i) EXPECT_NEAR(got[i], p[i], 1e-6) << "step " << step << " element " << i;
  }
  EXPECT_EQ(opt->step_count(), 3);
}

// Note [Weight decay by parameter]: a parameter the mask leaves out updates as without decay.
TEST(Optimizer, WeightDecayMaskSkipsTheParametersItLeavesOut) {
  for (const char* name : {"sgd", "adamw"}) {
    SCOPED_TRACE(name);
    auto after_two_steps = [&](double wd, bool masked) {
      Fixture f;
      ParamArena arena(f.params, Device::cpu());
      auto opt = std::string(name) == "sgd" ? make_sgd(arena, SgdConfig{0.1, 0.9, wd})
                                            : make_adamw(arena, AdamWConfig{0.1, 0.9, 0.999, 1e-8, wd});
      if (masked) opt->set_weight_decay_mask({true, false});  // a decays, b does not
      for (int step = 0; step < 2; ++step) {
        f.set_grads(step);
        opt->step();
      }
      return f.values();
    };
    const std::vector<double> masked = after_two_steps(0.5, true), decayed = after_two_steps(0.5, false),
                              plain = after_two_steps(0.0, false);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(masked[i], decayed[i]) << "a[" << i << "] decays";
    for (int i = 6; i < 9; ++i) EXPECT_EQ(masked[i], plain[i]) << "b[" << i - 6 << "] does not";
    for (int i = 0; i < 6; ++i) EXPECT_NE(decayed[i], plain[i]) << "the decay must show";
  }
}

TEST(Optimizer, BadSettingsAreClearErrors) {
  Fixture f;
  ParamArena arena(f.params, Device::cpu());
  EXPECT_TRUE(testing::throws_with([&] { make_sgd(arena, SgdConfig{-1, 0, 0}); }, {"sgd: learning rate"}));
  EXPECT_TRUE(testing::throws_with([&] { make_adamw(arena, AdamWConfig{0.1, 1.5, 0.9, 1e-8, 0}); }, {"adamw: betas"}));
}

TEST(ParamArena, ParametersAndGradientsAreViewsInReverseOrder) {
  Fixture f;
  ParamArena arena(f.params, Device::cpu());
  // b (registered last) comes first; a starts at b's 16-element aligned end.
  EXPECT_EQ(arena.offset_of(1), 0);
  EXPECT_EQ(arena.offset_of(0), 16);
  EXPECT_EQ(f.a.storage(), arena.flat_params().storage());
  EXPECT_EQ(f.a.grad().storage(), arena.flat_grads().storage());
  EXPECT_EQ(f.a.to_vector(), (std::vector<double>{0.5, -1.0, 2.0, 0.25, -0.75, 1.5}));
  f.set_grads(0);
  EXPECT_NE(arena.grad_slice(16, 22).to_vector()[0], 0.0);
  arena.zero_grad();
  for (double g : f.a.grad().to_vector()) EXPECT_EQ(g, 0.0);
}

}  // namespace
}  // namespace vitddp
