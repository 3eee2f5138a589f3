// StepClock on the CPU: spans and per-step times of a run that starts (resumes) mid-way.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "framework/optim/nonfinite.h"
#include "train/step_clock.h"

namespace vitddp {
namespace {

void run_steps(StepClock& clock, int64_t first, int64_t total) {
  for (int64_t s = first; s < total; ++s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    clock.end_step(s, Tensor::from_vector({1.5 + s}, {}, DType::kF32), Tensor(), Tensor());
  }
}

TEST(StepClock, ResumedRunTimesOnlyItsOwnSteps) {
  // Resumed at step 4 of 10: steps 0..3 never ran, so the span starts at the clock's creation.
  std::unique_ptr<StepClock> clock = make_step_clock(Device::cpu(), 10, 4);
  run_steps(*clock, 4, 10);
  const double span = clock->span_seconds(4, 9);
  EXPECT_GE(span, 6 * 0.002);
  EXPECT_LT(span, 5.0) << "the span must not reach back to steps that never ran";
  for (double dt : clock->step_seconds(5, 9)) {
    EXPECT_GE(dt, 0.002);
    EXPECT_LT(dt, 5.0);
  }
  EXPECT_DOUBLE_EQ(clock->loss(7), 8.5);
  EXPECT_EQ(clock->nonfinite(7), kNoNonfinite);
  EXPECT_FALSE(clock->stop_requested(7));
}

}  // namespace
}  // namespace vitddp
