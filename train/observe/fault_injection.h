// VITDDP_FAULT="RANK:STEP:KIND": the test hook that makes one rank fail in a chosen step (0-based),
// to test how the others stop and what they say (docs/reliability.md). Attached to the loop only
// when the variable is set. KIND: exit (status 7), kill (SIGKILL), hang (sleeps forever), nan
// (its loss, so its gradients, NaN). It strikes the first start of the ranks only; KIND:every
// (e.g. "1:3:exit:every") strikes every restart too (--max-restarts: Note [Elastic restarts]).
#pragma once

#include <cstdint>
#include <memory>

#include "train/observe/step_observer.h"

namespace vitddp {

class FaultInjection final : public StepObserver {
 public:
  // The fault VITDDP_FAULT names for `rank`, or null when it names none (or another rank).
  static std::unique_ptr<FaultInjection> from_environment(int rank);

  void step_begins(int64_t step) override;
  bool poisons_loss(int64_t step) override { return step == step_ && kind_ == Kind::kNan; }

 private:
  enum class Kind { kExit, kKill, kHang, kNan };
  FaultInjection(int rank, int64_t step, Kind kind) : rank_(rank), step_(step), kind_(kind) {}
  int rank_;
  int64_t step_;
  Kind kind_;
};

}  // namespace vitddp
