// The resumed-run check of StepClock, shared by the CPU test and the GPU (CUDA events) test.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "framework/optim/nonfinite.h"
#include "train/step_clock.h"

namespace vitddp::testing {

// Resumed at step 4 of 10: steps 0..3 never ran, so the span starts at the clock's creation.
// Each step sleeps 2 ms on the host; `min_step_seconds` is what the clock must see of it (the
// wall clock sees it all; GPU events only the device's time, so 0 there).
inline void check_resumed_clock(Device device, double min_step_seconds) {
  std::unique_ptr<StepClock> clock = make_step_clock(device, 10, 4);
  for (int64_t s = 4; s < 10; ++s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    clock->end_step(s, Tensor::from_vector({1.5 + s}, {}, DType::kF32).to(device), Tensor(), Tensor());
  }
  const double span = clock->span_seconds(4, 9);
  EXPECT_GE(span, 6 * min_step_seconds);
  EXPECT_LT(span, 5.0) << "the span must not reach back to steps that never ran";
  for (double dt : clock->step_seconds(5, 9)) {
    EXPECT_GE(dt, min_step_seconds);
    EXPECT_LT(dt, 5.0);
  }
  EXPECT_DOUBLE_EQ(clock->loss(7), 8.5);
  EXPECT_EQ(clock->nonfinite(7), kNoNonfinite);
  EXPECT_FALSE(clock->stop_requested(7));
}

}  // namespace vitddp::testing
