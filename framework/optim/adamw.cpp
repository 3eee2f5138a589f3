// AdamW over the arena's flat buffers, as torch.optim.AdamW (amsgrad off).
#include <cmath>

#include "framework/core/error.h"
#include "framework/optim/optimizer.h"

namespace vitddp {
namespace {

class AdamW final : public Optimizer {
 public:
  AdamW(ParamArena& arena, const AdamWConfig& config) : Optimizer(arena), config_(config) {
    VITDDP_CHECK(config.lr >= 0, "adamw: learning rate must be >= 0, got ", config.lr);
    VITDDP_CHECK(config.beta1 >= 0 && config.beta1 < 1 && config.beta2 >= 0 && config.beta2 < 1,
                 "adamw: betas must be in [0, 1)");
    VITDDP_CHECK(config.eps > 0, "adamw: eps must be positive");
    VITDDP_CHECK(config.weight_decay >= 0, "adamw: weight decay must be >= 0, got ", config.weight_decay);
    lr_ = config.lr;
    exp_avg_ = Tensor::zeros({arena.numel()}, DType::kF32, arena.device());
    exp_avg_sq_ = Tensor::zeros({arena.numel()}, DType::kF32, arena.device());
  }
  std::string name() const override { return "adamw"; }

  // The step's constants, fixed for all of its ranges.
  void begin_step() override {
    if (!begin_counted_step()) return;
    const double bc1 = 1.0 - std::pow(config_.beta1, static_cast<double>(step_count_));
    const double bc2 = 1.0 - std::pow(config_.beta2, static_cast<double>(step_count_));
    StepConstants c;
    c.lr = static_cast<float>(lr_);
    c.step_size = static_cast<float>(lr_ / bc1);
    c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
    c.decay = static_cast<float>(1.0 - lr_ * config_.weight_decay);
    publish(c);
  }

  void update(int64_t begin, int64_t end) override {
    if (!update_runs(begin, end)) return;
    float* p = arena_.flat_master().data<float>();  // (numel)
    float* m = exp_avg_.data<float>();
    float* v = exp_avg_sq_.data<float>();
    const float b1 = static_cast<float>(config_.beta1), b2 = static_cast<float>(config_.beta2),
                eps = static_cast<float>(config_.eps);
    if (arena_.device().is_cuda()) {
#if VITDDP_WITH_CUDA
      cuda::adamw_step(device_buffers(begin, end), m + begin, v + begin, b1, b2, eps);
      return;
#endif
    }
    VITDDP_CHECK(!arena_.mixed_precision(), "adamw: mixed precision needs a GPU");
    const float* g = static_cast<const float*>(arena_.flat_grads().data_ptr());
    report_nonfinite_on_host(g, begin, end);
    const StepConstants& c = constants();
    const float scale = host_grad_scale();
    for (int64_t i = begin; i < end; ++i) {
      const float gi = g[i] * scale;
      p[i] *= host_decays(i) ? c.decay : 1.0f;
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      p[i] -= c.step_size * m[i] / (std::sqrt(v[i]) * c.inv_sqrt_bc2 + eps);
    }
    update_ema_on_host(begin, end);
  }

 private:
  NamedTensors own_state() const override { return {{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}}; }

  AdamWConfig config_;
  Tensor exp_avg_;     // (numel) f32
  Tensor exp_avg_sq_;  // (numel) f32
};

}  // namespace

std::unique_ptr<Optimizer> make_adamw(ParamArena& arena, const AdamWConfig& config) {
  return std::make_unique<AdamW>(arena, config);
}

}  // namespace vitddp
