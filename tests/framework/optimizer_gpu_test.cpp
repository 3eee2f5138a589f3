// The fused GPU optimizers: against the CPU ones through ParamArena (three steps, the same
// weights), and the kernels alone on hand-made buffers of 1003 elements, quad-aligned (four at
// a time, then a three-element tail) and one element in (the scalar kernels), with bf16
// gradients and the bf16 weight copy, against the update written out on the host.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "common/gpu.h"
#include "common/test_utils.h"
#include "framework/cuda/optimizer.h"
#include "framework/nn/param_arena.h"
#include "framework/optim/grad_clip.h"
#include "framework/optim/optimizer.h"

namespace vitddp {
namespace {

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(ParamArena&)>;

// The weights (then the EMA, with `recipe`) after three steps on `device`, from the same start
// and gradients on every device. `recipe`: decay on the matrix only, gradients clipped to a
// norm below theirs, and a model EMA.
std::vector<double> after_three_steps(Device device, const MakeOptimizer& make, bool recipe = false) {
  Generator gen(23);
  Tensor a = testing::random_tensor({17, 59}, gen, DType::kF32).set_requires_grad(true);
  Tensor bias = testing::random_tensor({59}, gen, DType::kF32).set_requires_grad(true);
  ParamArena arena({{"a", a}, {"bias", bias}}, device);
  std::unique_ptr<Optimizer> opt = make(arena);
  std::unique_ptr<GradNormClip> clip;
  if (recipe) {
    opt->set_weight_decay_mask({true, false});
    clip = std::make_unique<GradNormClip>(arena, 2.0);  // the gradients' norm is about 18
    opt->set_grad_clip(clip.get());
    opt->enable_ema(0.9);
  }
  for (int step = 0; step < 3; ++step) {
    a.grad().copy_(testing::random_tensor({17, 59}, gen, DType::kF32));
    bias.grad().copy_(testing::random_tensor({59}, gen, DType::kF32));
    opt->step();
  }
  std::vector<double> out = a.to(Device::cpu()).to_vector();
  for (double v : bias.to(Device::cpu()).to_vector()) out.push_back(v);
  if (recipe) {
    EXPECT_LT(clip->scale().to(Device::cpu()).item(), 0.5) << "the clip must bite";
    for (double v : opt->ema().to(Device::cpu()).to_vector()) out.push_back(v);
  }
  return out;
}

void expect_same_updates(const MakeOptimizer& make, bool recipe = false) {
  std::vector<double> cpu = after_three_steps(Device::cpu(), make, recipe);
  std::vector<double> gpu = after_three_steps(Device::cuda(0), make, recipe);
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 1e-6 * (1 + std::abs(cpu[i]))) << i;
}

TEST(OptimizerGpu, ClipDecayMaskAndEmaMatchTheCpu) {
  VITDDP_REQUIRE_GPU();
  expect_same_updates([](ParamArena& arena) { return make_sgd(arena, SgdConfig{0.1, 0.9, 0.01}); }, true);
  expect_same_updates([](ParamArena& arena) { return make_adamw(arena, AdamWConfig{0.01, 0.9, 0.999, 1e-8, 0.05}); },
                      true);
}

TEST(OptimizerGpu, SgdWithMomentumAndWeightDecayMatchesTheCpu) {
  VITDDP_REQUIRE_GPU();
  expect_same_updates([](ParamArena& arena) { return make_sgd(arena, SgdConfig{0.1, 0.9, 0.01}); });
}

TEST(OptimizerGpu, AdamWMatchesTheCpu) {
  VITDDP_REQUIRE_GPU();
  expect_same_updates([](ParamArena& arena) { return make_adamw(arena, AdamWConfig{0.01, 0.9, 0.999, 1e-8, 0.05}); });
}

// Device buffers of kLength + 1 elements for the kernels; views start at element 0 or 1.
constexpr int64_t kLength = 1003;

struct DeviceBuffers {
  Tensor master, grads, params16, state_a, state_b;  // f32, bf16, bf16, f32, f32
  Tensor constants = Tensor::zeros({8}, DType::kF32, Device::cuda(0));  // StepConstants
  explicit DeviceBuffers(Generator& gen) {
    auto make = [&](DType dtype, double low, double high) {
      return testing::random_tensor({kLength + 1}, gen, DType::kF32, low, high).to(dtype).to(Device::cuda(0));
    };
    master = make(DType::kF32, -1, 1);
    grads = make(DType::kBF16, -1, 1);
    params16 = make(DType::kBF16, -1, 1);
    state_a = make(DType::kF32, -0.5, 0.5);
    state_b = make(DType::kF32, 0.01, 0.5);  // AdamW's second moment: positive
  }
  // (kLength) elements of `t` from element `first`, on the host in f32.
  static std::vector<double> host(const Tensor& t, int64_t first) {
    return t.as_strided({kLength}, {1}, first).to(Device::cpu()).to(DType::kF32).to_vector();
  }
  cuda::FlatBuffers flat(int64_t first, const StepConstants& step) const {
    cuda::write_step_constants(reinterpret_cast<StepConstants*>(constants.data<float>()), step);
    cuda::FlatBuffers b;
    b.constants = reinterpret_cast<const StepConstants*>(constants.data<float>());
    b.master = master.data<float>() + first;
    b.grads = static_cast<const char*>(grads.data_ptr()) + 2 * first;
    b.grad_dtype = DType::kBF16;
    b.params16 = static_cast<char*>(params16.data_ptr()) + 2 * first;
    b.params16_dtype = DType::kBF16;
    b.n = kLength;
    return b;
  }
};

// The bf16 copy is the updated master rounded to bf16, element for element.
void expect_copy_is_rounded_master(const DeviceBuffers& d, int64_t first) {
  const std::vector<double> copy = DeviceBuffers::host(d.params16, first);
  const std::vector<double> rounded = Tensor::from_vector(DeviceBuffers::host(d.master, first), {kLength})
                                          .to(DType::kBF16)
                                          .to(DType::kF32)
                                          .to_vector();
  EXPECT_EQ(copy, rounded) << "first element " << first;
}

TEST(OptimizerGpu, SgdKernelOnQuadsTailAndUnalignedBuffers) {
  VITDDP_REQUIRE_GPU();
  for (int64_t first : {0, 1}) {
    Generator gen(41 + static_cast<uint64_t>(first));
    DeviceBuffers d(gen);
    std::vector<double> w = DeviceBuffers::host(d.master, first), buf = DeviceBuffers::host(d.state_a, first);
    const std::vector<double> g = DeviceBuffers::host(d.grads, first);
    const float lr = 0.1f, mu = 0.9f, wd = 0.01f;
    const std::vector<double> all_before = d.master.to(Device::cpu()).to_vector();
    StepConstants step;
    step.lr = lr;
    cuda::sgd_step(d.flat(first, step), d.state_a.data<float>() + first, mu, wd);
    for (int64_t i = 0; i < kLength; ++i) {
      const double step = mu * buf[i] + (g[i] + wd * w[i]);
      buf[i] = step;
      w[i] -= lr * step;
    }
    const std::vector<double> got_w = DeviceBuffers::host(d.master, first);
    const std::vector<double> got_buf = DeviceBuffers::host(d.state_a, first);
    for (int64_t i = 0; i < kLength; ++i) {
      EXPECT_NEAR(got_w[i], w[i], 1e-6) << "first " << first << ", element " << i;
      EXPECT_NEAR(got_buf[i], buf[i], 1e-6) << "first " << first << ", element " << i;
    }
    expect_copy_is_rounded_master(d, first);
    // The one element of the buffers outside the view is untouched.
    const std::vector<double> all_after = d.master.to(Device::cpu()).to_vector();
    const int64_t outside = first == 1 ? 0 : kLength;
    EXPECT_EQ(all_after[outside], all_before[outside]) << "first " << first;
  }
}

TEST(OptimizerGpu, AdamWKernelOnQuadsTailAndUnalignedBuffers) {
  VITDDP_REQUIRE_GPU();
  for (int64_t first : {0, 1}) {
    Generator gen(43 + static_cast<uint64_t>(first));
    DeviceBuffers d(gen);
    std::vector<double> w = DeviceBuffers::host(d.master, first), m = DeviceBuffers::host(d.state_a, first);
    std::vector<double> v = DeviceBuffers::host(d.state_b, first);
    const std::vector<double> g = DeviceBuffers::host(d.grads, first);
    const float decay = 0.999f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, step_size = 0.01f, inv_sqrt_bc2 = 1.5f;
    StepConstants step;
    step.decay = decay;
    step.step_size = step_size;
    step.inv_sqrt_bc2 = inv_sqrt_bc2;
    cuda::adamw_step(d.flat(first, step), d.state_a.data<float>() + first, d.state_b.data<float>() + first, b1, b2,
                     eps);
    for (int64_t i = 0; i < kLength; ++i) {
      m[i] = b1 * m[i] + (1.0 - b1) * g[i];
      v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
      w[i] = w[i] * decay - step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps);
    }
    const std::vector<double> got_w = DeviceBuffers::host(d.master, first);
    const std::vector<double> got_m = DeviceBuffers::host(d.state_a, first);
    const std::vector<double> got_v = DeviceBuffers::host(d.state_b, first);
    for (int64_t i = 0; i < kLength; ++i) {
      EXPECT_NEAR(got_w[i], w[i], 1e-5) << "first " << first << ", element " << i;
      EXPECT_NEAR(got_m[i], m[i], 1e-6) << "first " << first << ", element " << i;
      EXPECT_NEAR(got_v[i], v[i], 1e-6) << "first " << first << ", element " << i;
    }
    expect_copy_is_rounded_master(d, first);
  }
}

}  // namespace
}  // namespace vitddp
