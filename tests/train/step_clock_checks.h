// The resumed-run check of StepClock, shared by the CPU test and the GPU (CUDA events) test.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "framework/core/error.h"
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

// A run four times longer than the GPU clock's ring of events (Note [A ring of step events]):
// every step's loss, non-finite flag and stop request read back after the run, old steps and
// recent ones alike; times positive, and the span their sum.
// `first` > 0: a resumed run, whose steps start there.
inline void check_long_run(Device device, int64_t first = 0) {
  constexpr int64_t kSteps = 260;
  std::unique_ptr<StepClock> clock = make_step_clock(device, first + kSteps, first);
  for (int64_t s = first; s < first + kSteps; ++s) {
    Tensor flag = s % 7 == 3 ? Tensor::from_vector({static_cast<double>(s)}, {1}, DType::kI64).to(device) : Tensor();
    Tensor stop = s % 5 == 0 ? Tensor::from_vector({s % 10 == 0 ? 1.0 : 0.0}, {}, DType::kF32).to(device) : Tensor();
    clock->end_step(s, Tensor::from_vector({0.25 * static_cast<double>(s)}, {}, DType::kF32).to(device), flag, stop);
    if (s % 50 == 49) EXPECT_DOUBLE_EQ(clock->loss(s - 1), 0.25 * static_cast<double>(s - 1));  // read as it runs
  }
  const int64_t last = first + kSteps - 1;
  for (int64_t s = first; s <= last; ++s) {
    EXPECT_DOUBLE_EQ(clock->loss(s), 0.25 * static_cast<double>(s)) << "step " << s;
    EXPECT_EQ(clock->nonfinite(s), s % 7 == 3 ? s : kNoNonfinite) << "step " << s;
    EXPECT_EQ(clock->stop_requested(s), s % 10 == 0) << "step " << s;
  }
  const std::vector<double> times = clock->step_seconds(first, last);
  ASSERT_EQ(times.size(), static_cast<size_t>(kSteps));
  double sum = 0.0;
  for (double dt : times) {
    EXPECT_GE(dt, 0.0);
    sum += dt;
  }
  EXPECT_NEAR(clock->span_seconds(first, last), sum, 1e-6 + 1e-6 * sum);
  EXPECT_NEAR(clock->span_seconds(first + 100, first + 199),
              clock->span_seconds(first, first + 199) - clock->span_seconds(first, first + 99), 1e-6);
  // Steps are ended in order, once each.
  EXPECT_THROW(clock->end_step(last, Tensor::from_vector({1.0}, {}, DType::kF32).to(device), Tensor(), Tensor()),
               Error);
}

}  // namespace vitddp::testing
