#include "train/observe/step_observer.h"

namespace vitddp {

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kGetBatch: return "get batch";
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kOptimizer: return "optimizer step";
  }
  return "";
}

std::unique_ptr<StepObserver> StepObservers::remove(StepObserver* observer) {
  for (auto it = observers_.begin(); it != observers_.end(); ++it)
    if (it->get() == observer) {
      std::unique_ptr<StepObserver> out = std::move(*it);
      observers_.erase(it);
      return out;
    }
  return nullptr;
}

void StepObservers::step_begins(int64_t step) {
  for (auto& o : observers_) o->step_begins(step);
}

void StepObservers::step_ends(int64_t step) {
  for (auto o = observers_.rbegin(); o != observers_.rend(); ++o) (*o)->step_ends(step);
}

void StepObservers::steps_finished(int newest_running) {
  for (auto& o : observers_) o->steps_finished(newest_running);
}

bool StepObservers::poisons_loss(int64_t step) {
  bool poison = false;
  for (auto& o : observers_) poison |= o->poisons_loss(step);
  return poison;
}

StepObservers::PhaseScope::PhaseScope(StepObservers& observers, Phase phase) : observers_(&observers), phase_(phase) {
  for (auto& o : observers_->observers_) o->phase_begins(phase_);
}

void StepObservers::PhaseScope::issued() {
  if (issued_ || ended_) return;
  issued_ = true;
  for (auto& o : observers_->observers_) o->phase_issued(phase_);
}

void StepObservers::PhaseScope::end() {
  if (ended_) return;
  issued();
  ended_ = true;
  for (auto o = observers_->observers_.rbegin(); o != observers_->observers_.rend(); ++o) (*o)->phase_ends(phase_);
}

}  // namespace vitddp
