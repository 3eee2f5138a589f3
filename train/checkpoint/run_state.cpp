#include "train/checkpoint/run_state.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "distributed/transfer/buddy_replicas.h"
#include "train/checkpoint/checkpoint.h"

namespace vitddp {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The newest step of `dir` whole for `rank`, 0 when none; a folder with step folders but none
// whole is warned of (in memory: the disk may still have one) or an error (on disk, as before).
int64_t newest_whole_step(const std::string& dir, int rank, bool warn_only) {
  if (dir.empty()) return 0;
  try {
    const std::optional<std::string> found = find_latest_checkpoint(dir, rank, std::cerr);
    return found ? checkpoint_step_of(*found) : 0;
  } catch (const Error& e) {
    if (!warn_only) throw;
    std::cerr << ("warning: " + std::string(e.what()) + "\n") << std::flush;
    return 0;
  }
}

}  // namespace

std::vector<double> value_of_every_rank(TrainingRun& run, double mine) {
  if (!run.ddp) return {mine};
  const Device on = run.device.is_cuda() ? run.device : Device::cpu();
  Tensor all = Tensor::empty({run.world, 1}, DType::kF64, on);
  run.ddp->group().allgather(Tensor::from_vector({mine}, {1}, DType::kF64).to(on), all)->wait();
  return all.to_vector();
}

std::string memory_checkpoint_folder() {
  const char* v = std::getenv("VITDDP_MEMORY_CHECKPOINTS");
  return v ? v : "";
}

int64_t resume_run(TrainingRun& run, std::ostream& out) {
  const auto began = std::chrono::steady_clock::now();
  const TrainConfig& c = run.config;
  const int rank = run.env.rank;
  // Note [Where a restart restores from]
  // This rank's newest whole step in its node's memory checkpoints, else on disk; the ranks
  // then agree on the oldest of those (all-gather). Memory checkpoints are double-buffered,
  // every rank saves at the same steps and at most one write is in flight (a rank killed during
  // it has the step before whole, which the others still keep), so that step is in every rank's
  // memory unless a rank lost its node's (then its disk's, or the run cannot go on and says which).
  const std::string memory = memory_checkpoint_folder();
  const int64_t in_memory = newest_whole_step(memory, rank, /*warn_only=*/true);
  int64_t step = in_memory > 0 ? in_memory : newest_whole_step(c.checkpoint_dir, rank, /*warn_only=*/false);
  // The ranks agree on the oldest newest step.
  for (double s : value_of_every_rank(run, static_cast<double>(step)))
    step = std::min<int64_t>(step, static_cast<int64_t>(s));
  run.recovery = {{"restart", restart_number()}, {"restored_from", "none"}, {"step", 0}};
  if (step <= 0) {
    out << "no checkpoint to resume from" << (c.checkpoint_dir.empty() ? "" : " in " + c.checkpoint_dir)
        << (memory.empty() ? "" : " or in memory") << "; starting at step 1\n";
    return 0;
  }
  PowerSgdHook* const powersgd = run.ddp ? run.ddp->powersgd() : nullptr;
  // PowerSGD state is expected where this run has the hook (a DDP run), not wherever --hook says so.
  CheckpointExpectations expect{run.model_config.name, run.model_config.parameter_count(), run.world,
                                run.arena->master_views(), run.optimizer->name(), run.optimizer->state(),
                                powersgd != nullptr};
  std::string dir, source;
  CheckpointState st;
  if (!memory.empty()) {
    try {
      dir = memory + "/" + checkpoint_step_name(step);
      st = load_checkpoint(dir, rank, expect);
      source = "memory";
    } catch (const Error& e) {
      VITDDP_CHECK(!c.checkpoint_dir.empty(), "rank ", rank, " cannot restore step ", step,
                   ": not in this node's memory checkpoints (", e.what(), ") and the run has no --checkpoint-dir");
      std::cerr << ("warning: rank " + std::to_string(rank) + ": step " + std::to_string(step) +
                    " from memory: " + e.what() + "; reading it from disk\n")
                << std::flush;
    }
  }
  if (source.empty()) {
    dir = c.checkpoint_dir + "/" + checkpoint_step_name(step);
    st = load_checkpoint(dir, rank, expect);
    source = "disk";
  }
  // A step this node's launcher got back from its buddy after the host was lost
  // (distributed/transfer/buddy_replicas.h) is named so.
  const std::string from_buddy = memory + "/" + transfer::BuddyReplicas::kFromBuddyFile;
  if (source == "memory" && ::access(from_buddy.c_str(), R_OK) == 0 &&
      read_text(from_buddy, 64, "a buddy's step name") == checkpoint_step_name(step))
    source = "buddy";
  const std::vector<std::string> changes = resume_setting_changes(st.config, c.to_json());
  if (!changes.empty()) {
    std::string list;
    for (const std::string& change : changes) list += (list.empty() ? "" : ", ") + change;
    out << "warning: resuming " << dir << " with settings its run did not have (" << list
        << "): training goes on, but not as the interrupted run would have\n";
  }
  restore_tensors(st.weights, run.arena->master_views(), "weights");
  if (run.arena->mixed_precision()) run.arena->flat_params().copy_(run.arena->flat_master());
  restore_tensors(st.optimizer_state, run.optimizer->state(), "optimizer state");
  run.optimizer->set_step_count(st.optimizer_steps);
  run.model->dropout_generator() = Generator(st.dropout_seed, st.dropout_counter);
  // The buckets first: the hook's per-bucket state is keyed by the saved ones.
  if (run.ddp && !st.buckets.empty()) run.ddp->reducer().restore_buckets(st.buckets);
  if (st.powersgd) {
    VITDDP_ASSERT(powersgd != nullptr, "a PowerSGD checkpoint for a run without the PowerSGD hook "
                  "(load_checkpoint checks that)");
    const std::vector<BucketInfo>& buckets = run.ddp->reducer().buckets();
    for (const auto& [index, b] : st.powersgd->buckets)
      VITDDP_CHECK(index < buckets.size() && (!b.error.defined() || b.error.numel() == buckets[index].numel), dir,
                   ": its PowerSGD state does not fit this run's gradient buckets (bucket ", index,
                   "); resume with the --bucket-mb (and first-, early- and tail-bucket-mb) it was saved with");
    powersgd->state() = powersgd_state_on(*st.powersgd, run.device);
  }
  run.start_step = st.step;
  run.recovery["restored_from"] = source;
  if (run.ddp) {  // where every rank's state came from, for rank 0's report
    const std::vector<std::string> sources = {"memory", "buddy", "disk"};
    const double mine = static_cast<double>(std::find(sources.begin(), sources.end(), source) - sources.begin());
    nlohmann::json by_rank = nlohmann::json::array();
    for (double v : value_of_every_rank(run, mine)) by_rank.push_back(sources.at(static_cast<size_t>(v)));
    run.recovery["by_rank"] = by_rank;
  }
  run.recovery["step"] = st.step;
  run.recovery["restore_seconds"] = seconds_since(began);
  if (const char* failed = std::getenv("VITDDP_FAILURE_TIME")) {
    // From the launcher's word of the failure to this rank's state restored: stopping the
    // world, starting the ranks, building the run, and the restore.
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    run.recovery["recovery_seconds"] = now - std::atof(failed);
  }
  out << "resumed from " << dir << " (step " << st.step << ", " << source << ")\n";
  return st.loader_step;
}

CheckpointState checkpoint_state_of(TrainingRun& run, int64_t steps_done) {
  if (run.ddp) {  // pending updates applied, every rank's state whole
    run.ddp->flush();
    run.ddp->gather_state();
  }
  const TrainConfig& c = run.config;
  CheckpointState st;
  st.step = steps_done;
  st.config = c.to_json();
  st.model_name = run.model_config.name;
  st.parameter_count = run.model_config.parameter_count();
  st.world_size = run.world;
  st.rank = run.env.rank;
  st.dropout_seed = run.model->dropout_generator().seed();
  st.dropout_counter = run.model->dropout_generator().counter();
  st.loader_step = steps_done * c.accumulate;
  st.optimizer_name = run.optimizer->name();
  st.optimizer_steps = run.optimizer->step_count();
  st.weights = run.arena->master_views();
  st.optimizer_state = run.optimizer->state();
  if (run.ddp) {
    for (const BucketInfo& b : run.ddp->reducer().buckets()) st.buckets.push_back(b.params);
    if (PowerSgdHook* powersgd = run.ddp->powersgd()) st.powersgd = powersgd->state();
  }
  return st;
}

int restart_number() {
  const char* v = std::getenv("VITDDP_RESTART");
  return v ? std::atoi(v) : 0;
}

std::string save_run(TrainingRun& run, int64_t steps_done, const std::string& dir, int keep) {
  const CheckpointState st = checkpoint_state_of(run, steps_done);
  CheckpointOptions options;
  options.keep = keep;
  return save_checkpoint(dir, st, options);
}

void save_run(TrainingRun& run, int64_t steps_done, std::ostream& out) {
  const std::string dir =
      save_run(run, steps_done, run.config.checkpoint_dir, static_cast<int>(run.config.checkpoint_keep));
  out << "checkpoint: " << dir << "\n" << std::flush;
}

}  // namespace vitddp
