// StepClock: per-step timing and loss read-back for the training loop. On the GPU it records
// CUDA events on the compute stream and copies each loss to pinned host memory
// asynchronously, so the host runs one step ahead of the device and never waits inside a step;
// on the CPU it uses the wall clock and reads the loss at once.
#pragma once

#include <memory>
#include <vector>

#include "framework/core/tensor.h"

namespace vitddp {

class StepClock {
 public:
  virtual ~StepClock() = default;
  // Call after the step's work (loss and the non-finite check included) has been issued.
  // `nonfinite` is NonfiniteCheck's flag, `stop` the all-reduced stop request (f32, one
  // element); either may be undefined (none).
  virtual void end_step(int64_t step, const Tensor& loss, const Tensor& nonfinite, const Tensor& stop) = 0;
  // Loss of `step` (waits for it on the GPU). Only for steps already ended.
  virtual double loss(int64_t step) = 0;
  // The step's non-finite flag (kNoNonfinite when none), read like the loss.
  virtual int64_t nonfinite(int64_t step) = 0;
  // Whether the step's stop request was set on any rank, read like the loss.
  virtual bool stop_requested(int64_t step) = 0;
  // Seconds per step for steps [first, last] (GPU: between consecutive step ends), in order.
  virtual std::vector<double> step_seconds(int64_t first, int64_t last) = 0;
  // Seconds from the end of step first - 1 (or the clock's start, for its first step) to the end of
  // step last.
  virtual double span_seconds(int64_t first, int64_t last) = 0;
};

// Steps [first_step, total_steps) will be ended, in order; the clock starts now (the start of
// first_step, which is > 0 when a run resumes from a checkpoint). Its memory grows with the steps
// ended, not with total_steps (Note [A ring of step events] in step_clock.cpp).
std::unique_ptr<StepClock> make_step_clock(Device device, int64_t total_steps, int64_t first_step = 0);

}  // namespace vitddp
