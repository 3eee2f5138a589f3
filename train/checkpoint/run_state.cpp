#include "train/checkpoint/run_state.h"

#include <algorithm>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "train/checkpoint/checkpoint.h"

namespace vitddp {

int64_t resume_run(TrainingRun& run, std::ostream& out) {
  const TrainConfig& c = run.config;
  const int rank = run.env.rank;
  std::optional<std::string> found = find_latest_checkpoint(c.checkpoint_dir, rank, std::cerr);
  int64_t step = found ? checkpoint_step_of(*found) : 0;
  if (run.ddp) {  // the ranks agree on the oldest newest step
    const Device on = run.device.is_cuda() ? run.device : Device::cpu();
    Tensor all = Tensor::empty({run.world, 1}, DType::kF64, on);
    run.ddp->group().allgather(Tensor::from_vector({static_cast<double>(step)}, {1}, DType::kF64).to(on), all)->wait();
    for (double s : all.to_vector()) step = std::min<int64_t>(step, static_cast<int64_t>(s));
  }
  if (step <= 0) {
    out << "no checkpoint to resume from in " << c.checkpoint_dir << "; starting at step 1\n";
    return 0;
  }
  PowerSgdHook* const powersgd = run.ddp ? run.ddp->powersgd() : nullptr;
  // PowerSGD state is expected where this run has the hook (a DDP run), not wherever --hook says so.
  CheckpointExpectations expect{run.model_config.name, run.model_config.parameter_count(), run.world,
                                run.arena->master_views(), run.optimizer->name(), run.optimizer->state(),
                                powersgd != nullptr};
  const std::string dir = c.checkpoint_dir + "/" + checkpoint_step_name(step);
  CheckpointState st = load_checkpoint(dir, rank, expect);
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
  out << "resumed from " << dir << " (step " << st.step << ")\n";
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

void save_run(TrainingRun& run, int64_t steps_done, std::ostream& out) {
  const TrainConfig& c = run.config;
  const CheckpointState st = checkpoint_state_of(run, steps_done);
  CheckpointOptions options;
  options.keep = static_cast<int>(c.checkpoint_keep);
  const std::string dir = save_checkpoint(c.checkpoint_dir, st, options);
  out << "checkpoint: " << dir << "\n" << std::flush;
}

}  // namespace vitddp
