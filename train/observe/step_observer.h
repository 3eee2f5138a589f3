// StepObserver: what watches a training loop's steps without being part of them: NVTX ranges
// for Nsight Systems, the --trace timeline, the CUDA profiler's capture range, injected faults
// for tests. The loop tells its observers when a step and each of its phases begin and end; an
// observer does not change what a step computes (FaultInjection aside, attached only when a test
// asks for it).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace vitddp {

// A step's phases, each a range in every view ("get batch", "forward", "backward", "optimizer
// step": Note [Range names] in framework/core/nvtx.h).
enum class Phase { kGetBatch, kForward, kBackward, kOptimizer };
const char* phase_name(Phase phase);

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void step_begins(int64_t step) { (void)step; }
  virtual void phase_begins(Phase phase) { (void)phase; }
  // The phase's GPU work is issued; its range goes on (backward: over the reducer's last waits).
  virtual void phase_issued(Phase phase) { (void)phase; }
  virtual void phase_ends(Phase phase) { (void)phase; }
  virtual void step_ends(int64_t step) { (void)step; }
  // The steps before the newest `newest_running` ones have finished on the device (the clock has
  // waited for them), so what they recorded can be read without waiting.
  virtual void steps_finished(int newest_running) { (void)newest_running; }
  // Whether this step's loss is to be made NaN (fault injection; nobody else says yes).
  virtual bool poisons_loss(int64_t step) {
    (void)step;
    return false;
  }
};

// The loop's observers, called in the order they were added (and in reverse at an end, so that
// their ranges nest). Owns them.
class StepObservers {
 public:
  void add(std::unique_ptr<StepObserver> observer) { observers_.push_back(std::move(observer)); }
  // Takes `observer` out (it hears nothing more) and gives it back; null when it is not here.
  std::unique_ptr<StepObserver> remove(StepObserver* observer);
  void step_begins(int64_t step);
  void step_ends(int64_t step);
  void steps_finished(int newest_running);
  bool poisons_loss(int64_t step);

  // A phase from its construction to end() (or its destruction); issued() marks its GPU work
  // issued. Move-only.
  class PhaseScope {
   public:
    PhaseScope(StepObservers& observers, Phase phase);
    ~PhaseScope() { end(); }
    PhaseScope(const PhaseScope&) = delete;
    PhaseScope& operator=(const PhaseScope&) = delete;
    void issued();
    void end();

   private:
    StepObservers* observers_;
    Phase phase_;
    bool issued_ = false, ended_ = false;
  };
  PhaseScope phase(Phase phase) { return PhaseScope(*this, phase); }

 private:
  std::vector<std::unique_ptr<StepObserver>> observers_;
};

}  // namespace vitddp
