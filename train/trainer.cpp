#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <memory>
#include <ostream>
#include <string>
#include <sstream>
#include <vector>

#include "framework/core/allocator.h"
#include "framework/io/safetensors.h"
#include "framework/ops/cast.h"
#include "framework/ops/cross_entropy.h"
#include "framework/ops/elementwise.h"
#include "train/checkpoint/memory_checkpoints.h"
#include "train/checkpoint/run_state.h"
#include "train/evaluate.h"
#include "train/graphed_step.h"
#include "train/observe/fault_injection.h"
#include "train/observe/nvtx_ranges.h"
#include "train/observe/op_breakdown.h"
#include "train/observe/profiler_range.h"
#include "train/observe/step_observer.h"
#include "train/observe/step_tracer.h"
#include "train/observe/trace_summary.h"
#include "train/observe/utilisation.h"
#include "train/run_setup.h"
#include "train/step_clock.h"
#include "train/stop_signal.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/device.h"
#endif

namespace vitddp {

// Note [Stopping on a signal]
// A signal reaches the ranks at slightly different moments, but they must stop after the same
// step, or one would wait forever in a collective. So each step all-reduces a "stop" flag, and
// the decision uses the reduced flag of the *previous* step, which every rank reads the same (on
// the GPU it arrives with the step's loss, without a wait). The flag's all-reduce goes after the
// step's collectives, so that none of a replayed graph's can run beside it; but before them when
// the step leaves its buckets in flight (next-forward updates), so that waiting for it at the
// step's end does not wait for them (the graph is off there).

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// The GPU's name for its peak rate (train/observe/utilisation.h); "" for the CPU.
std::string gpu_name(const Device& device) {
#if VITDDP_WITH_CUDA
  if (device.is_cuda()) {
    const std::vector<std::string> devices = cuda::describe_devices();  // "0: NVIDIA H200 (139 GiB)"
    if (device.index < static_cast<int>(devices.size())) return devices[device.index];
  }
#endif
  (void)device;
  return "";
}

class Trainer {
 public:
  Trainer(TrainingRun& run, std::ostream& out);
  RunResult train();

 private:
  Tensor train_step(int64_t step);
  Tensor forward_backward(const Tensor& images, const Tensor& labels, bool sync, int64_t micro,
                          const Tensor& loss_factor);
  Tensor replay_or_capture(int64_t step, const Batch& batch);
  void update();
  // Diagnostics and decisions: what the steps the device has finished say.
  void report_through(int64_t step);
  void report(int64_t step);
  int64_t nonfinite_of(int64_t step);
  void issue_stop_flag();
  void wait_stop_flag();
  bool stopping(int64_t step);
  RunResult finish(int64_t stopped_after);
  // --eval-data after `steps_done` steps, on every rank; its time is left out of the timing.
  void evaluate(int64_t steps_done);
  void finish_trace();
  void say_what_runs();

  TrainingRun& run_;
  const TrainConfig& config_;
  DistributedDataParallel* const ddp_;  // null without data parallelism
  std::ostream& out_;
  const int64_t total_;        // --steps: the steps of the whole run
  const int64_t timed_first_;  // the first step the summary times
  const int lag_;              // steps after its own a step's non-finite report is complete
  Allocator& allocator_;
  std::unique_ptr<StepClock> clock_;
  std::unique_ptr<GraphedStep> graphed_;  // --cuda-graph; null when off or not possible
  std::unique_ptr<Evaluator> evaluator_;  // --eval-data; null without
  double eval_seconds_ = 0;               // evaluations between timed steps
  double all_eval_seconds_ = 0;           // every evaluation so far
  std::chrono::steady_clock::time_point train_start_;  // the first step's start
  std::chrono::steady_clock::time_point step_ended_;   // the last step's end (its checkpoints done)
  MemoryCheckpoints memory_checkpoints_;               // --max-restarts: this node's launcher keeps them
  StepObservers observers_;
  StepTracer* tracer_ = nullptr;  // --trace: one of the observers, until finish_trace()
  Tensor stop_flag_;              // summed over ranks each step (DDP only)
  std::shared_ptr<Work> stop_work_;
  bool poison_loss_ = false;      // this step's loss made NaN (fault injection)
  int64_t step_images_ = 0;       // this rank's images in the last step (a file's last batch may be short)
  int64_t timed_images_ = 0;
  int64_t ended_through_ = -1;    // the last step the clock has ended
  int64_t reported_through_ = -1;
  bool told_rebuild_ = false;
  RunResult result_;
};

Trainer::Trainer(TrainingRun& run, std::ostream& out)
    : run_(run),
      config_(run.config),
      ddp_(run.ddp.get()),
      out_(out),
      total_(run.config.steps),
      // All but the first few steps of this process (set-up, GEMM tuning, the graph's capture),
      // and at least the last.
      timed_first_(std::min(run.start_step + run.config.untimed_steps, run.config.steps - 1)),
      lag_(run.ddp ? run.ddp->report_lag() : 0),
      allocator_(allocator_for(run.device)),
      memory_checkpoints_(run, out),
      ended_through_(run.start_step - 1),
      reported_through_(run.start_step - 1) {
  VITDDP_CHECK(run_.start_step < total_, "nothing to do: the checkpoint is at step ", run_.start_step,
               " and the run has ", total_, " steps (--steps)");
  clock_ = make_step_clock(run_.device, total_, run_.start_step);
  if (ddp_) stop_flag_ = Tensor::zeros({1}, DType::kF32, run_.device);
  if (config_.cuda_graph) {  // Note [A step as a CUDA graph]
    const std::string why = cuda_graph_unsupported(config_, total_ - run_.start_step);
    if (why.empty())
      graphed_ = std::make_unique<GraphedStep>(run_.start_step + kEagerStepsBeforeGraph, config_.batch_size,
                                               run_.device.index, ddp_ ? &ddp_->group() : nullptr,
                                               [this] { return !ddp_ || ddp_->hook().steady(); });
    else
      out_ << "cuda graph: off, every step runs eagerly: " << why << "\n";
  }
  // The observers, in the order their ranges nest.
  if (const auto [first, last] = config_.profile_range(); first > 0)
    observers_.add(std::make_unique<ProfilerRange>(first, last));
  if (auto fault = FaultInjection::from_environment(run_.env.rank)) observers_.add(std::move(fault));
  if (!config_.trace.empty()) {
    auto tracer = std::make_unique<StepTracer>(config_.trace, run_.env.rank, run_.world, run_.device,
                                               ddp_ ? &ddp_->group() : nullptr);
    tracer_ = tracer.get();
    if (ddp_) ddp_->reducer().set_observer(tracer_);
    observers_.add(std::move(tracer));
  }
  observers_.add(std::make_unique<NvtxRanges>());
  if (!config_.eval_data.empty()) evaluator_ = std::make_unique<Evaluator>(run_);
}

RunResult Trainer::train() {
  say_what_runs();
  const StopSignalScope stop_signals;
  int64_t stopped_after = -1;
  train_start_ = std::chrono::steady_clock::now();
  step_ended_ = train_start_;
  for (int64_t step = run_.start_step; step < total_; ++step) {
    if (step == timed_first_) {
      allocator_.reset_peak(run_.device.index);
      if (graphed_) graphed_->reset_peak_memory();
    }
    observers_.step_begins(step);
    if (lag_ > 0) issue_stop_flag();
    Tensor loss = train_step(step);
    if (lag_ == 0) issue_stop_flag();
    if (step >= timed_first_) timed_images_ += step_images_;
    observers_.step_ends(step);
    wait_stop_flag();
    clock_->end_step(step, loss, ddp_ ? ddp_->step_report(run_.nonfinite->flag()) : run_.nonfinite->flag(),
                     stop_flag_);
    ended_through_ = step;

    // --- the step is issued; what follows reads the steps before it, which the device finished ---
    report_through(step - 1 - lag_);
    observers_.steps_finished(1 + lag_);
    if (ddp_ && ddp_->reducer().rebuilds() > 0 && !told_rebuild_) {
      out_ << "buckets rebuilt from the order gradients arrived in: " << ddp_->reducer().buckets().size()
           << " buckets\n";
      told_rebuild_ = true;
    }
    const bool stop = stopping(step);
    if (!config_.checkpoint_dir.empty() &&
        (stop || (config_.checkpoint_every > 0 && (step + 1) % config_.checkpoint_every == 0))) {
      // This step first: a non-finite one stops the run under --nonfinite stop before anything
      // is saved (PowerSGD updates its state in place then: Note [PowerSGD and skipped steps]).
      report_through(step);
      if (ddp_) ddp_->group().check_health();  // the step's collectives are done: none failed
      save_run(run_, step + 1, out_);
    }
    const auto now = std::chrono::steady_clock::now();
    const double step_seconds = std::chrono::duration<double>(now - step_ended_).count();
    step_ended_ = now;
    if (memory_checkpoints_.due(step)) {
      report_through(step);
      if (ddp_) ddp_->group().check_health();
      memory_checkpoints_.save_after(step, step_seconds);
    }
    if (stop) {
      stopped_after = step;
      break;
    }
    if (evaluator_ && config_.eval_every > 0 && (step + 1) % config_.eval_every == 0 && step + 1 < total_) {
      report_through(step);  // a bad step stops the run before it is evaluated
      evaluate(step + 1);
    }
  }
  return finish(stopped_after);
}

// One optimizer step (`step`: its index, -1 for --op-breakdown's extra ones): `accumulate`
// micro-batches, of which only the last communicates, then the update.
Tensor Trainer::train_step(int64_t step) {
  // The schedule's rate, fixed at the step's begin_step (the extra steps of --op-breakdown keep
  // the last step's).
  run_.optimizer->set_lr(run_.schedule->at(step >= 0 ? step : total_ - 1));
  run_.arena->mark_grads_stale();  // not zeroed: overwritten by the first gradient (Note [Gradients in place])
  step_images_ = 0;
  poison_loss_ = step >= 0 && observers_.poisons_loss(step);
  Tensor step_loss;
  for (int64_t micro = 0; micro < config_.accumulate; ++micro) {
    const bool sync = micro + 1 == config_.accumulate;
    Batch batch;
    {
      auto phase = observers_.phase(Phase::kGetBatch);
      batch = run_.batches->next();
    }
    step_images_ += batch.images.shape()[0];
    if (ddp_ && sync) ddp_->begin_step();  // outside any graph: the step's host state
    Tensor loss = graphed_ && graphed_->takes(step, batch.images, batch.labels)
                      ? replay_or_capture(step, batch)
                      : forward_backward(batch.images, batch.labels, sync, micro, Tensor());
    step_loss = step_loss.defined() ? add(step_loss, loss) : loss;
  }
  update();
  return step_loss;
}

// One micro-batch's forward and backward; DDP reduces the gradients when `sync`. `loss_factor`:
// a device scalar the loss is multiplied by (the graph's, Note [A step as a CUDA graph]).
Tensor Trainer::forward_backward(const Tensor& images, const Tensor& labels, bool sync, int64_t micro,
                                 const Tensor& loss_factor) {
  Tensor loss;
  {
    auto phase = observers_.phase(Phase::kForward);
    Tensor logits = run_.model->forward(images.to(run_.compute_dtype));
    // In f32 whatever the compute dtype, as autocast; `labels` are soft targets under Mixup/CutMix.
    loss = cross_entropy(cast(logits, DType::kF32), labels, config_.label_smoothing);
  }
  if (config_.accumulate > 1) loss = scale(loss, 1.0 / static_cast<double>(config_.accumulate));
  if (loss_factor.defined())
    loss = mul(loss, loss_factor);
  else if (poison_loss_)
    loss = scale(loss, std::nan(""));
  if (ddp_) ddp_->begin_backward(micro, sync);
  {
    // The range covers the whole backward, the reducer's waits for the last buckets included; the
    // traced compute interval ends when backward's kernels are issued, so that time the compute
    // stream spends waiting for communication counts as exposed.
    auto phase = observers_.phase(Phase::kBackward);
    loss.backward();                  // communication runs beside it
    run_.arena->zero_stale_grads();   // parameters no gradient reached (usually none)
    phase.issued();
    if (ddp_) ddp_->end_backward(sync);
  }
  return loss.detach();
}

Tensor Trainer::replay_or_capture(int64_t step, const Batch& batch) {
  const int64_t replays_before = graphed_->replays();
  Tensor loss = graphed_->run(step, batch.images, batch.labels, poison_loss_,
                              [this](const Tensor& images, const Tensor& labels, const Tensor& loss_factor) {
                                return forward_backward(images, labels, /*sync=*/true, /*micro=*/0, loss_factor);
                              },
                              out_);
  if (graphed_->replays() > replays_before && ddp_) ddp_->replayed();  // no host backward ran
  return loss;
}

// The update, where it runs after backward (next-forward and sharded updates run elsewhere).
void Trainer::update() {
  if (ddp_ && !ddp_->updates_in_step()) return;
  auto phase = observers_.phase(Phase::kOptimizer);
  if (!run_.scan_in_update) run_.nonfinite->run();  // --nonfinite skip: every gradient scanned first
  // Skipped on the device when the check found a NaN or Inf; the same on every rank (the
  // gradients are all-reduced).
  if (ddp_)
    ddp_->step();
  else
    run_.optimizer->step();
}

void Trainer::issue_stop_flag() {
  if (!ddp_) return;
  stop_flag_.fill_(stop_signal() != 0 ? 1.0 : 0.0);
  stop_work_ = ddp_->group().allreduce(stop_flag_, ReduceOp::kSum);
}

void Trainer::wait_stop_flag() {
  if (!stop_work_) return;
  stop_work_->wait();
  stop_work_.reset();
}

// Note [Stopping on a signal]: one process reads the signal itself; ranks read step - 1's flag.
bool Trainer::stopping(int64_t step) {
  return ddp_ ? step > run_.start_step && clock_->stop_requested(step - 1) : stop_signal() != 0;
}

// Reports every step up to `step` not yet reported (each once); on the GPU a step is read one
// step later (see StepClock).
void Trainer::report_through(int64_t step) {
  for (; reported_through_ < step; ++reported_through_) report(reported_through_ + 1);
}

int64_t Trainer::nonfinite_of(int64_t s) {
  if (lag_ == 0) return clock_->nonfinite(s);
  // The report is complete once the step's updates ran: recorded with the next step, or, for the
  // last step ended, read now after applying them.
  if (s < ended_through_) return clock_->nonfinite(s + 1);
  ddp_->flush();
  return run_.nonfinite->flag().to(Device::cpu()).data<int64_t>()[0];
}

void Trainer::report(int64_t s) {
  const double loss_value = clock_->loss(s);
  const int64_t bad = nonfinite_of(s);
  if (bad != kNoNonfinite) {
    // A hook that made finite gradients non-finite says so.
    const std::string cause = ddp_ ? ddp_->hook().explain_nonfinite(s - run_.start_step) : "";
    const std::string where = "step " + std::to_string(s + 1) + " (rank " + std::to_string(run_.env.rank) +
                              "): non-finite gradient in " + run_.nonfinite->parameter_at(bad) + " (loss " +
                              std::to_string(loss_value) + ")" +
                              (run_.scan_in_update ? "; the run stops before anything of this step is saved"
                                                   : "; the update was not applied") +
                              (cause.empty() ? "" : "; " + cause);
    if (config_.nonfinite == "stop")
      throw Error(where + ". --nonfinite skip skips such steps instead", ErrorKind::kNumeric);
    out_ << where << ": step skipped\n";
    ++result_.skipped_steps;
  } else if (!std::isfinite(loss_value)) {
    throw Error("step " + std::to_string(s + 1) + ": loss is " + std::to_string(loss_value), ErrorKind::kNumeric);
  }
  result_.losses.push_back(loss_value);
  if (config_.print_every > 0 && (s % config_.print_every == 0 || s == total_ - 1)) {
    const double dt = clock_->step_seconds(s, s)[0];
    out_ << "step " << std::setw(4) << s + 1 << "/" << total_ << (s < timed_first_ ? " (untimed)" : "") << "  loss "
         << std::fixed << std::setprecision(4) << loss_value << "  " << std::setprecision(1) << config_.batch_size / dt
         << " img/s  " << std::setprecision(2) << dt * 1e3 << " ms" << std::defaultfloat << "\n"
         << std::flush;
  }
}

void Trainer::say_what_runs() {
  result_.chosen = run_.chosen;
  result_.config = config_;
  result_.device = run_.device_name;
  result_.model = run_.model_config;
  result_.parameters = run_.model_config.parameter_count();
  result_.world_size = run_.world;
  if (ddp_) out_ << "data parallel: " << ddp_->describe() << "\n";
  out_ << "training " << run_.model_config.name << " (" << result_.parameters << " parameters) on " << run_.device_name
       << ", batch " << config_.batch_size << ", " << config_.precision << ", " << total_ - run_.start_step << " steps"
       << (run_.start_step > 0 ? " (from step " + std::to_string(run_.start_step + 1) + ")" : std::string()) << ", "
       << run_.optimizer->name() << " lr " << run_.schedule->describe() << ", data " << config_.data << "\n";
  std::vector<std::string> recipe;
  auto number = [](double v) {
    std::ostringstream s;
    s << v;
    return s.str();
  };
  if (config_.label_smoothing > 0) recipe.push_back("label smoothing " + number(config_.label_smoothing));
  if (config_.clip_grad_norm > 0) recipe.push_back("gradient norm clipped at " + number(config_.clip_grad_norm));
  if (config_.model_ema > 0) recipe.push_back("model EMA of decay " + number(config_.model_ema));
  if (config_.mixup_alpha > 0) recipe.push_back("Mixup alpha " + number(config_.mixup_alpha));
  if (config_.cutmix_alpha > 0) recipe.push_back("CutMix alpha " + number(config_.cutmix_alpha));
  if (config_.mixup_alpha > 0 && config_.cutmix_alpha > 0) recipe.back() += " (one of the two per batch)";
  for (size_t i = 0; i < recipe.size(); ++i) out_ << (i == 0 ? "recipe: " : ", ") << recipe[i];
  if (!recipe.empty()) out_ << "\n";
  out_ << std::flush;
}

void Trainer::evaluate(int64_t steps_done) {
  const auto start = std::chrono::steady_clock::now();
  EvalResult r = evaluator_->evaluate(steps_done);
  r.train_seconds = std::chrono::duration<double>(start - train_start_).count() - all_eval_seconds_;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  all_eval_seconds_ += seconds;
  if (steps_done > timed_first_ && steps_done < total_) eval_seconds_ += seconds;
  result_.evals.push_back(r.to_json());
  out_ << r.summary() << "\n" << std::flush;
}

void Trainer::finish_trace() {
  if (!tracer_) return;
  if (ddp_) ddp_->reducer().set_observer(nullptr);
  std::unique_ptr<StepObserver> tracer = observers_.remove(tracer_);
  std::optional<RunStats> stats = tracer_->finish(timed_first_);
  tracer_ = nullptr;
  if (!stats) return;
  result_.trace = trace_summary(*stats);
  print_trace_summary(result_.trace, config_.trace, out_);
}

RunResult Trainer::finish(int64_t stopped_after) {
  report_through(stopped_after >= 0 ? stopped_after : total_ - 1);
  if (graphed_) {
    out_ << "cuda graph: " << graphed_->replays() << " step(s) replayed after the captured one\n";
    result_.graph_replays = graphed_->replays();
  }
  // Replays issue nothing on the host: their work is the captured step's.
  if (ddp_) {
    for (const std::string& line : {ddp_->schedule().summary(), ddp_->hook().summary()})
      if (!line.empty()) out_ << line << (graphed_ ? " (replays issue none: they repeat the captured step's)" : "") << "\n";
    result_.backend = ddp_->group().backend();
    result_.buckets = static_cast<int64_t>(ddp_->reducer().buckets().size());
    result_.bucket_bytes.clear();
    for (const BucketInfo& b : ddp_->reducer().buckets()) result_.bucket_bytes.push_back(static_cast<int64_t>(b.bytes));
  }
  finish_trace();
  if (ddp_) {  // the last step's updates and every rank's state, before the weights are read or saved
    ddp_->flush();
    ddp_->gather_state();
  }
  result_.first_step = run_.start_step + 1;
  result_.recovery = run_.recovery;
  memory_checkpoints_.finish();  // the last save's write, before the run reports it
  result_.memory_checkpoints = memory_checkpoints_.to_json();
  if (run_.clip) result_.grad_norm = run_.clip->norm().to(Device::cpu()).item();
  if (stopped_after >= 0) {
    out_ << "stopped by signal " << stop_signal() << " after step " << stopped_after + 1
         << (config_.checkpoint_dir.empty() ? " (no --checkpoint-dir: nothing saved)" : "")
         << (config_.save.empty() ? "" : "; --save " + config_.save + " not written (the run did not finish)") << "\n";
    result_.steps = stopped_after + 1 - run_.start_step;
    result_.stopped_early = true;
    return result_;
  }
  if (evaluator_) evaluate(total_);
  result_.bad_samples = run_.batches->bad_samples();
  if (!config_.save.empty() && run_.env.rank == 0) {
    if (ddp_) ddp_->group().check_health();  // the last step's collectives are done: none failed
    write_safetensors(config_.save, run_.arena->master_views());
    out_ << "saved weights to " << config_.save << "\n";
    if (const Tensor ema = run_.optimizer->ema(); ema.defined()) {
      const std::string path = ema_file_for(config_.save);
      write_safetensors(path, run_.arena->views_of(ema.to(Device::cpu())));
      out_ << "saved the weights' EMA to " << path << "\n";
    }
  }

  // --- the run is over; everything after this is diagnostics ---
  if (config_.op_breakdown) {
    // Its two extra steps are not reported like the others. Under --nonfinite stop their updates
    // run whatever the gradients hold, so each one's flag is read once it has run, before the
    // next step and before anything is saved (under skip a bad one was not applied).
    auto stop_if_bad = [&] {
      const int64_t bad = run_.nonfinite->flag().to(Device::cpu()).data<int64_t>()[0];
      if (run_.scan_in_update && bad != kNoNonfinite)
        throw Error("a step of --op-breakdown (rank " + std::to_string(run_.env.rank) + "): non-finite gradient in " +
                        run_.nonfinite->parameter_at(bad) + "; the run stops before anything is saved",
                    ErrorKind::kNumeric);
    };
    auto whole_step = [&] {  // with its updates applied, so that its flag can be read
      Tensor loss = train_step(-1);
      if (ddp_) ddp_->flush();
      return loss;
    };
    result_.op_breakdown = op_breakdown(whole_step, stop_if_bad, ddp_ ? &ddp_->group() : nullptr, out_);
  }

  result_.steps = total_ - run_.start_step;
  result_.timed_steps = total_ - timed_first_;
  result_.untimed_steps = timed_first_ - run_.start_step;
  result_.seconds = clock_->span_seconds(timed_first_, total_ - 1) - eval_seconds_;
  result_.steps_per_s = static_cast<double>(result_.timed_steps) / result_.seconds;
  // The images the timed steps took (rank 0's, times the ranks: the sampler gives each rank as
  // many), not batch size x steps: a file dataset's last batch of an epoch may be short.
  result_.images_per_s = static_cast<double>(timed_images_) * run_.world / result_.seconds;
  result_.median_step_ms = median(clock_->step_seconds(timed_first_, total_ - 1)) * 1e3;
  // With the CUDA graph the step's activations live in the graph's memory, beside the allocator's.
  result_.peak_memory_mib =
      static_cast<double>(allocator_.peak_bytes(run_.device.index) + (graphed_ ? graphed_->peak_memory_bytes() : 0)) /
      (1 << 20);
  result_.loader_images_per_s = run_.batches->loader_images_per_second();
  const Utilisation use = utilisation(result_.images_per_s / run_.world, run_.model_config.training_flops_per_image(),
                                      gpu_name(run_.device));
  result_.gpu_peak_tflops = use.peak_tflops;
  result_.achieved_tflops_per_gpu = use.tflops_per_gpu;
  result_.mfu_pct = use.mfu_pct;
  out_ << result_.summary_line() << "\n";
  return result_;
}

}  // namespace

RunResult run_training(const TrainConfig& config, std::ostream& out) {
  return run_training(config, RankEnvironment{}, out);
}

RunResult run_training(const TrainConfig& config, const RankEnvironment& env, std::ostream& all_ranks_out) {
  // Only rank 0 reports; the others train quietly (their errors still reach stderr).
  std::ostream null_stream(nullptr);
  std::ostream& out = env.rank == 0 ? all_ranks_out : null_stream;
  TrainingRun run = set_up_run(config, env, out);
  return Trainer(run, out).train();
}

RunResult run_training(const TrainConfig& config, const RankEnvironment& env, std::ostream& out,
                       const std::function<void(TrainingRun&)>& after) {
  TrainingRun run = set_up_run(config, env, out);
  RunResult result = Trainer(run, out).train();
  after(run);
  return result;
}

}  // namespace vitddp
