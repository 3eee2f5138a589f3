// Memory checkpoints: with --max-restarts, every rank saves its state every N steps into its
// node's memory checkpoint folder (in /dev/shm, made and kept by the node's launcher, so it
// outlives the rank: distributed/launcher.h), in the disk checkpoints' format, two steps kept
// (a save cut short leaves the previous one whole). A restart restores from there first
// (train/checkpoint/run_state.h). Disk checkpoints (--checkpoint-dir) stay as they are.
//
// N is chosen, unless the expert key memory-checkpoint-every sets it: after the first timed
// step every rank saves once and times it against that step; N makes the saves cost at most 2%
// of the training time (the ranks take the largest N, so they save at the same steps).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include <nlohmann/json.hpp>

namespace vitddp {

struct TrainingRun;

class MemoryCheckpoints {
 public:
  // Inactive without the launcher's folder (VITDDP_MEMORY_CHECKPOINTS).
  MemoryCheckpoints(TrainingRun& run, std::ostream& out);
  bool active() const { return !folder_.empty(); }
  // Whether a save is due after step `step` (0-based).
  bool due(int64_t step) const;
  // Saves after step `step`, which took `step_seconds` of wall time (the first save chooses N).
  void save_after(int64_t step, double step_seconds);
  // {"folder", "every", "saves", "last_step", "save_seconds" (the last save's)}; null when inactive.
  nlohmann::json to_json() const;

  static constexpr double kMaxShare = 0.02;  // of the training time

 private:
  void save(int64_t steps_done);
  int64_t agreed_interval(int64_t mine);

  TrainingRun& run_;
  std::ostream& out_;
  std::string folder_;
  int64_t every_ = 0;       // 0 until chosen
  int64_t first_save_ = 0;  // the step after which the first (timing) save happens
  int64_t saves_ = 0, last_step_ = -1;
  double last_seconds_ = 0;
};

}  // namespace vitddp
