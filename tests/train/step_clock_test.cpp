// StepClock on the CPU: spans and per-step times of a run that starts (resumes) mid-way.
#include <gtest/gtest.h>

#include "step_clock_checks.h"

namespace vitddp {
namespace {

TEST(StepClock, ResumedRunTimesOnlyItsOwnSteps) { testing::check_resumed_clock(Device::cpu(), 0.002); }

TEST(StepClock, ALongRunKeepsEveryStep) { testing::check_long_run(Device::cpu()); }

TEST(StepClock, AResumedLongRunKeepsEveryStep) { testing::check_long_run(Device::cpu(), 100); }

}  // namespace
}  // namespace vitddp
