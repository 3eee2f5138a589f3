// StepClock on the GPU (CUDA events): spans and per-step times of a run that starts (resumes) mid-way.
#include <gtest/gtest.h>

#include "common/gpu.h"
#include "train/step_clock_checks.h"

namespace vitddp {
namespace {

TEST(StepClockGpu, ResumedRunTimesOnlyItsOwnSteps) {
  VITDDP_REQUIRE_GPU();
  // GPU time between events: the host's sleeps do not show.
  testing::check_resumed_clock(Device::cuda(0), 0.0);
}

// Four times the ring of events: the old steps are read from host memory, the recent ones
// from their slots.
TEST(StepClockGpu, ALongRunKeepsEveryStep) {
  VITDDP_REQUIRE_GPU();
  testing::check_long_run(Device::cuda(0));
  testing::check_long_run(Device::cuda(0), 100);  // resumed: the ring's slots start mid-way
}

}  // namespace
}  // namespace vitddp
