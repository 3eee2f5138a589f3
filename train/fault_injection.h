// VITDDP_FAULT: the test hook that makes a rank fail in a chosen step (tests/train/*fault*).
#pragma once

#include <cstdint>

namespace vitddp {

// Test hook for fault handling: VITDDP_FAULT="RANK:STEP:exit" makes that rank exit with
// status 7 at the start of that step; "RANK:STEP:kill" kills it with SIGKILL there;
// "RANK:STEP:hang" makes it sleep there forever;
// "RANK:STEP:nan" makes its loss (so its gradients) NaN in that step. Returns true for "nan".
bool inject_fault(int rank, int64_t step);

}  // namespace vitddp
