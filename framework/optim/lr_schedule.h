// LrSchedule: the learning rate of every optimizer step, as torchvision's classification
// recipe builds it, per step rather than per epoch: SequentialLR(LinearLR(start_factor =
// warmup_decay, total_iters = warmup_steps), MAIN, milestones = [warmup_steps]) where MAIN is
//   constant  the base rate
//   cosine    CosineAnnealingLR(T_max = total_steps - warmup_steps, eta_min = min_lr)
//   step      StepLR(step_size, gamma)
// A pure function of the step, so a resumed run continues it exactly.
#pragma once

#include <cstdint>
#include <string>

namespace vitddp {

struct LrScheduleConfig {
  std::string kind = "constant";  // constant | cosine | step
  double base_lr = 1e-3;
  int64_t total_steps = 1;        // steps of the run (cosine reaches min_lr after the last)
  int64_t warmup_steps = 0;       // linear warm-up from base_lr * warmup_decay
  double warmup_decay = 0.01;     // torchvision's --lr-warmup-decay
  double min_lr = 0.0;            // cosine's eta_min
  int64_t step_size = 0;          // step: steps between decays (0: a third of the steps after warm-up)
  double gamma = 0.1;             // step: the factor of each decay
};

class LrSchedule {
 public:
  // Throws vitddp::Error naming the bad setting.
  explicit LrSchedule(LrScheduleConfig config);
  // The rate of step `step` (0-based: the update that ends step step + 1).
  double at(int64_t step) const;
  const LrScheduleConfig& config() const { return config_; }
  // "0.003 cosine to 0 over 900 steps, after 100 linear warm-up steps from 9.9e-05", "0.001".
  std::string describe() const;

 private:
  LrScheduleConfig config_;
};

}  // namespace vitddp
