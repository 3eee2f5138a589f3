// --profile-steps A:B: cudaProfilerStart before step A and cudaProfilerStop after step B (1-based),
// for `nsys profile --capture-range=cudaProfilerApi`.
#pragma once

#include <cstdint>

#include "train/observe/step_observer.h"

namespace vitddp {

class ProfilerRange final : public StepObserver {
 public:
  ProfilerRange(int64_t first, int64_t last) : first_(first), last_(last) {}
  void step_begins(int64_t step) override;
  void step_ends(int64_t step) override;

 private:
  int64_t first_, last_;
};

}  // namespace vitddp
