// SIGINT and SIGTERM during a run: recorded, not acted on at once; the trainer finishes the step,
// saves and stops (Note [Stopping on a signal] in train/trainer.cpp).
#pragma once

#include <atomic>
#include <csignal>

namespace vitddp {

// The signal received during the current run's StopSignalScope, or 0.
int stop_signal();
// The same, as the flag the handlers set, for code that polls it (ChildOptions::stop_request).
const std::atomic<int>& stop_signal_flag();

// Records SIGINT and SIGTERM for one run, from a clear flag, and puts the previous handlers back
// when the run ends, however it ends.
class StopSignalScope {
 public:
  StopSignalScope();
  ~StopSignalScope();
  StopSignalScope(const StopSignalScope&) = delete;
  StopSignalScope& operator=(const StopSignalScope&) = delete;

 private:
  struct sigaction old_int_ {}, old_term_{};
};

}  // namespace vitddp
