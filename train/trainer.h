// The training loop of one process: batch -> forward -> loss -> backward (data parallelism's
// communication beside it) -> update, then what the steps say: progress, checkpoints, the
// summary and the JSON result. Timelines, profiler ranges and injected faults watch it as
// observers (train/observe/step_observer.h).
#pragma once

#include <functional>
#include <iosfwd>

#include "distributed/launcher.h"
#include "train/config.h"
#include "train/run_result.h"

namespace vitddp {

// One process's training. With a rank environment of world size > 1 it is one rank of a
// data-parallel run (only rank 0 prints); otherwise a single-process run.
RunResult run_training(const TrainConfig& config, const RankEnvironment& env, std::ostream& out);
RunResult run_training(const TrainConfig& config, std::ostream& out);
// The same, handing the finished run (its model, arena, optimizer and hooks as training left
// them) to `after` before it is torn down: for benches of a run's state.
struct TrainingRun;
RunResult run_training(const TrainConfig& config, const RankEnvironment& env, std::ostream& out,
                       const std::function<void(TrainingRun&)>& after);

}  // namespace vitddp
