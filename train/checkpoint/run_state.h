// A training run's state in and out of checkpoints (train/checkpoint/checkpoint.h): the weights,
// the optimizer's state, the dropout generator, the loader's position, and with data parallelism
// the buckets and the PowerSGD state.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <vector>

#include "train/checkpoint/checkpoint.h"
#include "train/run_setup.h"

namespace vitddp {

// Restores the newest checkpoint that is whole on every rank into `run` (the ranks agree on the
// oldest of their newest), from this node's memory checkpoints when they hold it, else from
// --checkpoint-dir; sets run.start_step and run.recovery and returns the loader's next global
// batch; 0 (with a note) when there is none. Warns when the run's settings differ from the
// saved run's.
int64_t resume_run(TrainingRun& run, std::ostream& out);

// The run's state after `steps_done` steps, as save_run writes it: views of the live tensors
// (on the run's device). Data parallelism's pending updates are applied and sharded state
// gathered first.
CheckpointState checkpoint_state_of(TrainingRun& run, int64_t steps_done);

// Saves the run after `steps_done` steps into --checkpoint-dir; every rank writes its files.
// Data parallelism's pending updates are applied and sharded state gathered first.
void save_run(TrainingRun& run, int64_t steps_done, std::ostream& out);
// The same into `dir`, keeping `keep` whole steps; returns the step folder.
std::string save_run(TrainingRun& run, int64_t steps_done, const std::string& dir, int keep);

// `mine` from every rank, in rank order (an all-gather over the run's process group); {mine}
// without data parallelism. For what the ranks must agree on.
std::vector<double> value_of_every_rank(TrainingRun& run, double mine);

// This node's memory checkpoint folder (VITDDP_MEMORY_CHECKPOINTS, set by the launcher), "" without.
std::string memory_checkpoint_folder();
// Which restart of the ranks this is (VITDDP_RESTART, set by the launcher; 0: the first start).
int restart_number();

}  // namespace vitddp
