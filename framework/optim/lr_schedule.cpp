#include "framework/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "framework/core/error.h"

namespace vitddp {

LrSchedule::LrSchedule(LrScheduleConfig c) : config_(std::move(c)) {
  VITDDP_CHECK(config_.kind == "constant" || config_.kind == "cosine" || config_.kind == "step",
               "lr schedule: the kind must be constant, cosine or step, got '", config_.kind, "'");
  VITDDP_CHECK(config_.base_lr >= 0 && std::isfinite(config_.base_lr), "lr schedule: the base rate must be >= 0, got ", config_.base_lr);
  VITDDP_CHECK(config_.total_steps >= 1, "lr schedule: needs at least one step, got ", config_.total_steps);
  VITDDP_CHECK(config_.warmup_steps >= 0 && config_.warmup_steps < config_.total_steps,
               "lr schedule: warm-up steps must be in [0, steps), got ", config_.warmup_steps, " for ",
               config_.total_steps, " steps");
  VITDDP_CHECK(config_.warmup_decay > 0 && config_.warmup_decay <= 1, "lr schedule: the warm-up decay must be in (0, 1], got ",
               config_.warmup_decay);
  VITDDP_CHECK(config_.min_lr >= 0 && config_.min_lr <= config_.base_lr, "lr schedule: the minimum rate must be in [0, base rate], got ",
               config_.min_lr);
  VITDDP_CHECK(config_.step_size >= 0, "lr schedule: the step size must be >= 0, got ", config_.step_size);
  VITDDP_CHECK(config_.gamma > 0 && config_.gamma <= 1, "lr schedule: gamma must be in (0, 1], got ", config_.gamma);
  if (config_.kind == "step" && config_.step_size == 0)
    config_.step_size = std::max<int64_t>(1, (config_.total_steps - config_.warmup_steps) / 3);
}

double LrSchedule::at(int64_t step) const {
  const LrScheduleConfig& c = config_;
  const int64_t w = c.warmup_steps;
  if (step < w) {  // LinearLR's closed form: start + (1 - start) * step / total
    return c.base_lr * (c.warmup_decay + (1.0 - c.warmup_decay) * static_cast<double>(step) / static_cast<double>(w));
  }
  const int64_t t = step - w;  // the main schedule's own step
  if (c.kind == "cosine") {
    const double t_max = static_cast<double>(c.total_steps - w);
    return c.min_lr + (c.base_lr - c.min_lr) * (1.0 + std::cos(M_PI * static_cast<double>(t) / t_max)) / 2.0;
  }
  if (c.kind == "step") return c.base_lr * std::pow(c.gamma, static_cast<double>(t / c.step_size));
  return c.base_lr;
}

std::string LrSchedule::describe() const {
  const LrScheduleConfig& c = config_;
  std::ostringstream out;
  out << c.base_lr;
  if (c.kind == "cosine") out << " cosine to " << c.min_lr << " over " << c.total_steps - c.warmup_steps << " steps";
  if (c.kind == "step") out << ", times " << c.gamma << " every " << c.step_size << " steps";
  if (c.warmup_steps > 0)
    out << ", after " << c.warmup_steps << " linear warm-up steps from " << c.base_lr * c.warmup_decay;
  return out.str();
}

}  // namespace vitddp
