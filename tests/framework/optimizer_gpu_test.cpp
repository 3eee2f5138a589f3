// The fused GPU optimizers against the CPU ones: the same parameters and gradients, three
// steps, the same weights. 1003 elements: the kernels' quads (four at a time) and a tail.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "common/gpu.h"
#include "common/test_utils.h"
#include "framework/nn/param_arena.h"
#include "framework/optim/optimizer.h"

namespace vitddp {
namespace {

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(ParamArena&)>;

// The weights after three steps on `device`, from the same start and gradients on every device.
std::vector<double> after_three_steps(Device device, const MakeOptimizer& make) {
  Generator gen(23);
  Tensor a = testing::random_tensor({17, 59}, gen, DType::kF32).set_requires_grad(true);
  ParamArena arena({{"a", a}}, device);
  std::unique_ptr<Optimizer> opt = make(arena);
  for (int step = 0; step < 3; ++step) {
    a.grad().copy_(testing::random_tensor({17, 59}, gen, DType::kF32));
    opt->step();
  }
  return a.to(Device::cpu()).to_vector();
}

void expect_same_updates(const MakeOptimizer& make) {
  std::vector<double> cpu = after_three_steps(Device::cpu(), make);
  std::vector<double> gpu = after_three_steps(Device::cuda(0), make);
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 1e-6 * (1 + std::abs(cpu[i]))) << i;
}

TEST(OptimizerGpu, SgdWithMomentumAndWeightDecayMatchesTheCpu) {
  VITDDP_REQUIRE_GPU();
  expect_same_updates([](ParamArena& arena) { return make_sgd(arena, SgdConfig{0.1, 0.9, 0.01}); });
}

TEST(OptimizerGpu, AdamWMatchesTheCpu) {
  VITDDP_REQUIRE_GPU();
  expect_same_updates([](ParamArena& arena) { return make_adamw(arena, AdamWConfig{0.01, 0.9, 0.999, 1e-8, 0.05}); });
}

}  // namespace
}  // namespace vitddp
