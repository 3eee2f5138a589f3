// NVTX ranges of the loop for Nsight Systems, always on (they cost a function call without a
// tool attached): "step N" and each phase inside it, in the "vitddp" domain.
#pragma once

#include <vector>

#include "framework/core/nvtx.h"
#include "train/observe/step_observer.h"

namespace vitddp {

class NvtxRanges final : public StepObserver {
 public:
  void step_begins(int64_t step) override;
  void phase_begins(Phase phase) override;
  void phase_ends(Phase phase) override;
  void step_ends(int64_t step) override;

 private:
  std::vector<NvtxRange> open_;  // the step's range, then its phases'
};

}  // namespace vitddp
