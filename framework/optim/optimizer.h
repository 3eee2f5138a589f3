// Optimizers update every parameter of a ParamArena in one pass over its flat buffers, so the
// GPU versions are one fused launch each. State tensors are flat too and named for checkpoints.
#pragma once

#include <memory>
#include <string>

#include "framework/nn/param_arena.h"

namespace vitddp {

struct SgdConfig {
  double lr = 0.01;
  double momentum = 0.9;
  double weight_decay = 0.0;
};

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Applies one update from the arena's gradients: begin_step(), then update() of every element.
  void step() {
    begin_step();
    update(0, size());
  }
  // Note [An update in ranges]
  // One step's update may be applied range by range, each range when its gradients are ready
  // (distributed/update/next_forward.h applies a DDP bucket's range at the next forward's first
  // use of its parameters). begin_step() comes once per step, before its ranges: it advances the
  // step count, fixes the learning rate and bias corrections the ranges use, and clears the
  // non-finite report, which each range then lowers to the smallest bad element index of the
  // whole arena. update(begin, end) applies that step to arena elements [begin, end); the ranges
  // of one step must not overlap, and together they must cover every parameter before the next
  // begin_step() (the arena's alignment padding may be left out: it stays zero either way).
  // Elementwise updates make the result bit-identical to one step().
  virtual void begin_step() = 0;
  virtual void update(int64_t begin, int64_t end) = 0;
  // Elements of the arena it updates.
  virtual int64_t size() const = 0;
  virtual std::string name() const = 0;
  // State for checkpoints: flat tensors by name, plus the step count.
  virtual NamedTensors state() const = 0;
  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t steps) { step_count_ = steps; }
  void set_lr(double lr) { lr_ = lr; }
  // With a flag from NonfiniteCheck, step() does nothing when the flag is set (on the GPU the
  // kernel reads it, so the host never waits). The step count still advances on the GPU.
  void set_skip_flag(const Tensor& flag) { skip_flag_ = flag; }
  // Note [The non-finite scan in the update]
  // A step whose gradients hold a NaN or Inf must not reach weights that are used or saved.
  // Under --nonfinite skip, NonfiniteCheck reads every gradient first and the update skips on
  // its flag (set_skip_flag): one extra pass over the gradients. Under --nonfinite stop the run
  // ends at that step before saving anything, so the update may run regardless, as long as the
  // step is known to be bad: with a report flag, step() finds the smallest index of a
  // non-finite gradient element in the same pass as the update and leaves it in `flag`
  // (kNoNonfinite when there is none), at the cost of a few compares per element and no extra
  // read. The weights then hold that step's update, NaNs included; the caller must stop before
  // using them.
  void set_nonfinite_report(const Tensor& flag) { report_flag_ = flag; }
  double lr() const { return lr_; }

 protected:
  // CPU: whether the flag says to skip (reads it; the CPU has nothing to wait for).
  bool skip_on_host() const;
  // What every begin_step() starts with: on the CPU a skipped step does not count (on the GPU
  // the kernel skips, and it counts); else the step count advances and the non-finite report
  // is cleared. Returns false when the step is skipped.
  bool begin_counted_step();
  // Checks an update range against the arena's size; false when this step is skipped.
  bool update_runs(int64_t begin, int64_t end) const;
  // CPU: lowers the report flag (if any) to the first non-finite gradient in [begin, end) of
  // `grads`, an arena index. The scan is a pass of its own, before the update: the same answer.
  void report_nonfinite_on_host(const float* grads, int64_t begin, int64_t end) const;
  const int64_t* device_skip_flag() const { return skip_flag_.defined() ? skip_flag_.data<int64_t>() : nullptr; }
  int64_t* report_flag() const { return report_flag_.defined() ? report_flag_.data<int64_t>() : nullptr; }

  int64_t step_count_ = 0;
  double lr_ = 0;
  Tensor skip_flag_;
  Tensor report_flag_;  // see set_nonfinite_report
  bool skipped_ = false;  // this step, on the CPU (begin_counted_step)
};

// PyTorch's SGD (dampening 0, no Nesterov): g += wd * p; buf = momentum * buf + g; p -= lr * buf.
std::unique_ptr<Optimizer> make_sgd(ParamArena& arena, const SgdConfig& config);
// PyTorch's AdamW (decoupled weight decay, bias-corrected moments).
std::unique_ptr<Optimizer> make_adamw(ParamArena& arena, const AdamWConfig& config);

}  // namespace vitddp
