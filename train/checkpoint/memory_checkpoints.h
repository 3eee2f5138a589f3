// Memory checkpoints: with --max-restarts, every rank saves its state every N steps into its
// node's memory checkpoint folder (in /dev/shm, made and kept by the node's launcher, so it
// outlives the rank: distributed/launcher.h), in the disk checkpoints' format, two steps kept
// (a save cut short leaves the previous one whole). A restart restores from there first
// (train/checkpoint/run_state.h). Disk checkpoints (--checkpoint-dir) stay as they are. On several
// hosts the launcher also copies each whole step to a buddy host (distributed/transfer/
// buddy_replicas.h), for a host that is lost whole.
//
// A save copies the state to host memory, which is all the step waits for, and a thread writes
// the copy while training goes on (Note [Saves beside training] in the .cpp).
//
// N is chosen, unless the expert key memory-checkpoint-every sets it: after the first timed
// step every rank saves once, waiting for the whole write, and times both parts against that
// step; N makes the copies cost at most 2% of the training time and leaves each write the time
// to finish before the next copy (the ranks take the largest N, so they save at the same steps).
#pragma once

#include <cstdint>
#include <exception>
#include <iosfwd>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/core/tensor.h"
#include "train/checkpoint/checkpoint.h"

namespace vitddp {

struct TrainingRun;

class MemoryCheckpoints {
 public:
  // Inactive without the launcher's folder (VITDDP_MEMORY_CHECKPOINTS).
  MemoryCheckpoints(TrainingRun& run, std::ostream& out);
  ~MemoryCheckpoints();  // waits for a write in flight (its error, if any, is printed)
  MemoryCheckpoints(const MemoryCheckpoints&) = delete;
  MemoryCheckpoints& operator=(const MemoryCheckpoints&) = delete;
  bool active() const { return !folder_.empty(); }
  // Whether a save is due after step `step` (0-based).
  bool due(int64_t step) const;
  // Saves after step `step`, which took `step_seconds` of wall time (the first save chooses N).
  void save_after(int64_t step, double step_seconds);
  // Waits for the write in flight; throws its error.
  void finish();
  // {"folder", "every", "saves", "last_step", "copy_seconds" (what the last save made its step
  // wait), "write_seconds" (its write, beside training)}; null when inactive.
  nlohmann::json to_json() const;

  static constexpr double kMaxShare = 0.02;  // of the training time

 private:
  void copy_to_host(int64_t steps_done);
  void write(const CheckpointState& state);
  int64_t agreed_interval(int64_t mine);

  TrainingRun& run_;
  std::ostream& out_;
  std::string folder_;
  int64_t every_ = 0;       // 0 until chosen
  int64_t first_save_ = 0;  // the step after which the first (timing) save happens
  int64_t saves_ = 0, last_step_ = -1;
  double copy_seconds_ = 0, write_seconds_ = 0;
  CheckpointState copy_;      // the state as the last save copied it, its tensors those of host_
  std::vector<Tensor> host_;  // host memory for every tensor of the state (pinned on a GPU), reused
  std::thread writer_;
  std::exception_ptr write_error_;
};

}  // namespace vitddp
