// SGD with momentum and weight decay over the arena's flat buffers: one loop on the CPU, one
// fused launch on the GPU.
#include "framework/core/error.h"
#include "framework/optim/optimizer.h"

namespace vitddp {
namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(ParamArena& arena, const SgdConfig& config) : Optimizer(arena), config_(config) {
    VITDDP_CHECK(config.lr >= 0, "sgd: learning rate must be >= 0, got ", config.lr);
    VITDDP_CHECK(config.momentum >= 0 && config.momentum < 1, "sgd: momentum must be in [0, 1), got ",
                 config.momentum);
    VITDDP_CHECK(config.weight_decay >= 0, "sgd: weight decay must be >= 0, got ", config.weight_decay);
    lr_ = config.lr;
    // Plain SGD keeps no state: no buffer, no memory.
    if (config.momentum > 0) momentum_ = Tensor::zeros({arena.numel()}, DType::kF32, arena.device());
  }
  std::string name() const override { return "sgd"; }

  // The learning rate of the step, fixed for all of its ranges.
  void begin_step() override {
    if (!begin_counted_step()) return;
    StepConstants c;
    c.lr = static_cast<float>(lr_);
    publish(c);
  }

  void update(int64_t begin, int64_t end) override {
    if (!update_runs(begin, end)) return;
    float* p = arena_.flat_master().data<float>();  // (numel)
    float* buf = momentum_.defined() ? momentum_.data<float>() : nullptr;
    const float mu = static_cast<float>(config_.momentum), wd = static_cast<float>(config_.weight_decay);
    if (arena_.device().is_cuda()) {
#if VITDDP_WITH_CUDA
      cuda::sgd_step(device_buffers(begin, end), buf ? buf + begin : nullptr, mu, wd);
      return;
#endif
    }
    VITDDP_CHECK(!arena_.mixed_precision(), "sgd: mixed precision needs a GPU");
    const float* g = static_cast<const float*>(arena_.flat_grads().data_ptr());
    report_nonfinite_on_host(g, begin, end);
    const float lr = constants().lr, scale = host_grad_scale();
    for (int64_t i = begin; i < end; ++i) {
      float d = g[i] * scale + (host_decays(i) ? wd : 0.0f) * p[i];
      if (buf) {
        // PyTorch seeds the buffer with the first gradient; a zero buffer times mu gives the same.
        buf[i] = mu * buf[i] + d;
        d = buf[i];
      }
      p[i] -= lr * d;
    }
    update_ema_on_host(begin, end);
  }

 private:
  NamedTensors own_state() const override {
    if (!momentum_.defined()) return {};
    return {{"momentum_buffer", momentum_}};
  }

  SgdConfig config_;
  Tensor momentum_;  // (numel) f32, only with momentum
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(ParamArena& arena, const SgdConfig& config) {
  return std::make_unique<Sgd>(arena, config);
}

}  // namespace vitddp
