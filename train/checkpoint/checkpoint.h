// Checkpoints: everything one rank needs to continue a run exactly where it stopped, saved so
// that a crash at any moment leaves the previous checkpoint whole. See docs/reliability.md.
//
// Layout (every rank writes its own pair of files; the PowerSGD state differs per rank):
//
//   DIR/step-000120/rank-0.safetensors  "weights.<param>", "optim.<state>", "powersgd.b<i>.error|q|sent_p"
//                                       (with sent_p, the error buffer holds M and the error is
//                                       M - sent_p Q^T: Note [The error settled a step late])
//   DIR/step-000120/rank-0.json         the record: step, model, world size, RNG, loader step,
//                                       config, and the tensors file's size and CRC-32
//   DIR/step-000120/rank-1.{safetensors,json}
//   DIR/LATEST                          "step-000120": informational, written by rank 0
//
// Write order, per rank (see Note [Checkpoint write order] in checkpoint.cpp): the tensors file
// (temp, fsync, rename, fsync dir), THEN the record (the same). A record's presence therefore
// means its tensors file was whole when written; the CRC catches later damage. A step is
// whole when every rank's record is present and this rank's tensors match its record.
//
// Every problem with a checkpoint is a vitddp::Error of one line that starts with the file's
// path and says what is wrong (and, for mismatches, both sides).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "distributed/hooks/powersgd.h"
#include "framework/io/file_util.h"  // crc32, file_crc32: the record's CRC-32, also for callers
#include "framework/io/safetensors.h"

namespace vitddp {

// What one rank saves and gets back. Tensors come back on the CPU, contiguous.
struct CheckpointState {
  int64_t step = 0;              // optimizer steps done: the run continues with step `step`
  nlohmann::json config;         // TrainConfig::to_json() of the saving run (an object; informational)
  std::string model_name;        // VitConfig::name, e.g. "vit_l_32"
  int64_t parameter_count = 0;   // VitConfig::parameter_count()
  int world_size = 1;
  int rank = 0;
  uint64_t dropout_seed = 0;     // the model's dropout Generator: (seed, counter)
  uint64_t dropout_counter = 0;
  int64_t loader_step = 0;       // global batch the loader returns next (LoaderOptions::start_step)
  std::string optimizer_name;    // Optimizer::name()
  int64_t optimizer_steps = 0;   // Optimizer::step_count()
  NamedTensors weights;          // ParamArena::master_views(): f32 master weights by parameter name
  NamedTensors optimizer_state;  // Optimizer::state()
  std::optional<PowerSgdState> powersgd;  // this rank's PowerSGD state when the run's hook is PowerSGD
  // DDP: the reducer's buckets (parameter indices, bucket order), rebuilt or not; the hook's
  // per-bucket state is keyed by them. Empty when not data-parallel (or saved without them).
  std::vector<std::vector<size_t>> buckets;
};

// What the resuming run is; load_checkpoint refuses a checkpoint that does not match.
struct CheckpointExpectations {
  std::string model_name;
  int64_t parameter_count = 0;
  int world_size = 1;
  NamedTensors weights;          // names, shapes and dtypes required (e.g. arena.master_views())
  std::string optimizer_name;
  NamedTensors optimizer_state;  // likewise (optimizer->state())
  bool powersgd = false;         // the run's hook is PowerSGD: its state must be in the checkpoint
};

struct CheckpointOptions {
  int keep = 2;  // whole checkpoints kept; older ones are deleted after a save completes (>= 1)
};

// Every tensor of `state` with its name in the tensors file ("weights.<param>", "optim.<state>",
// "powersgd.b<i>.error|q|sent_p"), in the file's order, as the state's own handle: `f` may
// replace it (memory checkpoints put host copies in its place).
void for_each_checkpoint_tensor(CheckpointState& state, const std::function<void(const std::string&, Tensor&)>& f);
// The same as a list; views of the state, not copies.
NamedTensors checkpoint_tensors(const CheckpointState& state);

// "step-000120" (six digits or more); and back from a step folder's path (-1 if it is not one).
std::string checkpoint_step_name(int64_t step);
int64_t checkpoint_step_of(const std::string& step_dir);

// Writes this rank's files for `state.step` under `dir` (created if needed), then applies
// retention and (rank 0) updates DIR/LATEST. Returns the step folder. Test hook: with
// VITDDP_TEST_PAUSE_IN_SAVE set (not "0"; "step:N" for the save of step N only), it prints
// "VITDDP_TEST_PAUSE_IN_SAVE: paused ..." to stderr after writing half of the tensors temp file
// and sleeps 30 s, so a test can kill it there.
std::string save_checkpoint(const std::string& dir, const CheckpointState& state,
                            const CheckpointOptions& options = {});

// The newest step folder under `dir` that is whole for `rank` (see above), or nullopt when `dir`
// holds no step folders (or does not exist). A newer step that is not whole (a save interrupted,
// a file damaged) is reported to `log` in one "warning: ..." line and skipped. Throws when step
// folders exist but none is whole, naming each one's problem. A step saved with a different world
// size is returned as it is, so that load_checkpoint refuses it by name.
// In DDP every rank calls this; the ranks then agree on the minimum of their steps (all-reduce
// MIN): see docs/reliability.md.
std::optional<std::string> find_latest_checkpoint(const std::string& dir, int rank, std::ostream& log);

// The settings that decide which data a resumed run sees and how its steps run, where `now`
// (TrainConfig::to_json() of this run) differs from the checkpoint's record of its own (`saved`):
// "--seed 1 -> 3" each, in a fixed order. Keys an older record lacks are not compared. The
// checkpoint holds what a resume needs to continue exactly, not these: a change is allowed
// (the trainer warns), but the run is then not the one that was interrupted.
std::vector<std::string> resume_setting_changes(const nlohmann::json& saved, const nlohmann::json& now);

// Before a run that checkpoints into `dir` starts (the launcher, or each rank of an external
// one): makes the folder, so that a path that cannot be made fails now and not at the first
// save, and, when the run does not --resume, refuses a folder that already holds step folders:
// its first save's retention would delete them (Note [Checkpoint retention]). Throws
// vitddp::Error naming the folder and the newest step found.
void check_checkpoint_dir(const std::string& dir, bool resume);

// Reads and checks `rank`'s files in `step_dir`: the record's JSON (well-formed, no unknown keys,
// no missing fields, the right types), the model, world size, optimizer and PowerSGD use against
// `expect`, the presence of every rank's record, the tensors file's size and CRC-32, its format,
// and every tensor's name, shape and dtype.
CheckpointState load_checkpoint(const std::string& step_dir, int rank, const CheckpointExpectations& expect);

// Parses a record's text (rank-R.json) with every check load_checkpoint makes of it, and
// throws vitddp::Error naming `label` on the first problem. The fuzzers' entry point.
void check_checkpoint_record(const std::string& text, const std::string& label);

// Copies `saved` (as load_checkpoint returns them) into `targets` (any device) by name; the
// names, shapes and dtypes must match exactly (load_checkpoint has checked them against the
// expectations). For weights into arena.master_views() and state into optimizer->state().
void restore_tensors(const NamedTensors& saved, const NamedTensors& targets, const std::string& what);

// PowerSGD state as load_checkpoint returns it (CPU) moved to `device`, ready to assign to
// PowerSgdHook::state().
PowerSgdState powersgd_state_on(const PowerSgdState& saved, Device device);

}  // namespace vitddp
