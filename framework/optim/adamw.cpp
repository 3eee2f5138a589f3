// AdamW over the arena's flat buffers, as torch.optim.AdamW (amsgrad off).
#include <cmath>

#include "framework/core/error.h"
#include "framework/optim/flat_buffers.h"
#include "framework/optim/optimizer.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/optimizer.h"
#endif

namespace vitddp {
namespace {

class AdamW final : public Optimizer {
 public:
  AdamW(ParamArena& arena, const AdamWConfig& config) : arena_(arena), config_(config) {
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
  NamedTensors state() const override { return {{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}}; }

  int64_t size() const override { return arena_.numel(); }

  // The step's constants, fixed for all of its ranges.
  void begin_step() override {
    if (!begin_counted_step()) return;
    const double bc1 = 1.0 - std::pow(config_.beta1, static_cast<double>(step_count_));
    const double bc2 = 1.0 - std::pow(config_.beta2, static_cast<double>(step_count_));
    step_size_ = static_cast<float>(lr_ / bc1);
    inv_sqrt_bc2_ = static_cast<float>(1.0 / std::sqrt(bc2));
    decay_ = static_cast<float>(1.0 - lr_ * config_.weight_decay);
  }

  void update(int64_t begin, int64_t end) override {
    if (!update_runs(begin, end)) return;
    float* p = arena_.flat_master().data<float>();  // (numel)
    float* m = exp_avg_.data<float>();
    float* v = exp_avg_sq_.data<float>();
    const float b1 = static_cast<float>(config_.beta1), b2 = static_cast<float>(config_.beta2),
                eps = static_cast<float>(config_.eps);
    const float step_size = step_size_, inv_sqrt_bc2 = inv_sqrt_bc2_, decay = decay_;
    if (arena_.device().is_cuda()) {
#if VITDDP_WITH_CUDA
      cuda::adamw_step(flat_buffers(arena_, device_skip_flag(), report_flag(), begin, end), m + begin, v + begin, decay,
                       b1, b2, eps, step_size, inv_sqrt_bc2);
      return;
#endif
    }
    VITDDP_CHECK(!arena_.mixed_precision(), "adamw: mixed precision needs a GPU");
    const float* g = static_cast<const float*>(arena_.flat_grads().data_ptr());
    report_nonfinite_on_host(g, begin, end);
    for (int64_t i = begin; i < end; ++i) {
      p[i] *= decay;
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      p[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps);
    }
  }

 private:
  ParamArena& arena_;
  AdamWConfig config_;
  Tensor exp_avg_;     // (numel) f32
  Tensor exp_avg_sq_;  // (numel) f32
  float step_size_ = 0, inv_sqrt_bc2_ = 1, decay_ = 1;  // this step's (begin_step)
};

}  // namespace

std::unique_ptr<Optimizer> make_adamw(ParamArena& arena, const AdamWConfig& config) {
  return std::make_unique<AdamW>(arena, config);
}

}  // namespace vitddp
