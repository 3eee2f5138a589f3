#include "train/trainer.h"

#include <algorithm>
#include <iostream>
#include <optional>
#include <cstdlib>
#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "data/sampler.h"
#include "framework/core/devices.h"
#include "framework/core/allocator.h"
#include "framework/io/safetensors.h"
#include "framework/nn/param_arena.h"
#include "framework/ops/cast.h"
#include "framework/ops/cross_entropy.h"
#include "framework/optim/nonfinite.h"
#include "framework/optim/optimizer.h"
#include "distributed/hooks/powersgd.h"
#include "distributed/overlapped_update.h"
#include "distributed/sharded_update.h"
#include "distributed/update_in_backward.h"
#include "framework/core/nvtx.h"
#include "framework/core/random.h"
#include "framework/ops/elementwise.h"
#include "train/batch_source.h"
#include "train/checkpoint.h"
#include "train/auto_settings.h"
#include "train/dataset_factory.h"
#include "train/device_choice.h"
#include "train/device_setup.h"
#include "train/fault_injection.h"
#include "train/graphed_step.h"
#include "train/op_breakdown.h"
#include "train/stop_signal.h"
#include "train/ddp_wiring.h"
#include "train/run_facts.h"
#include "train/step_clock.h"
#include "train/step_tracer.h"
#include "train/utilisation.h"
#include "train/trace_summary.h"
#include "models/vit/vit.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/device.h"
#include "framework/cuda/profiler.h"
#endif

namespace vitddp {
namespace {

// The GPU's name for its peak rate (train/utilisation.h); "" for the CPU.
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

VitConfig model_config(const TrainConfig& c, bool on_gpu) {
  std::string name = c.model == "auto" ? (on_gpu ? "vit_l_32" : "vit_tiny") : c.model;
  VitConfig m = vit_config_by_name(name);
  auto override_dim = [](int64_t flag, int64_t& field) {
    if (flag > 0) field = flag;
  };
  override_dim(c.image_size, m.image_size);
  override_dim(c.patch_size, m.patch_size);
  override_dim(c.layers, m.num_layers);
  override_dim(c.heads, m.num_heads);
  override_dim(c.hidden_dim, m.hidden_dim);
  override_dim(c.mlp_dim, m.mlp_dim);
  override_dim(c.classes, m.num_classes);
  m.dropout = c.dropout;
  m.validate();
  return m;
}

}  // namespace

ResolvedRun resolve_run(const TrainConfig& c, const RankEnvironment& env, std::ostream& log) {
  const std::string device = choose_device(c, env, visible_gpu_count(), describe_visible_gpus, log);
  return {device, model_config(c, parse_device(device).is_cuda())};
}

nlohmann::json RunResult::to_json() const {
  nlohmann::json j;
  j["system"] = "vitddp";
  j["device"] = device;
  j["model"] = model.name;
  j["params"] = parameters;
  j["steps"] = steps;
  j["first_step"] = first_step;
  j["timed_steps"] = timed_steps;
  j["untimed_steps"] = untimed_steps;
  j["stopped_early"] = stopped_early;
  j["steps_per_s"] = steps_per_s;
  j["images_per_s"] = images_per_s;
  j["world_size"] = world_size;
  j["skipped_steps"] = skipped_steps;
  const char* p2p = std::getenv("NCCL_P2P_DISABLE");
  j["nccl_p2p_disable"] = p2p ? p2p : "0";
  j["median_step_ms"] = median_step_ms;
  j["peak_mem_mib"] = peak_memory_mib;
  j["loader_images_per_s"] = loader_images_per_s;
  j["train_gflop_per_image"] = model.training_flops_per_image() / 1e9;
  j["achieved_tflops_per_gpu"] = achieved_tflops_per_gpu;
  j["gpu_peak_tflops"] = gpu_peak_tflops > 0 ? nlohmann::json(gpu_peak_tflops) : nlohmann::json();
  j["mfu_pct"] = mfu_pct ? nlohmann::json(*mfu_pct) : nlohmann::json();
  j["precision"] = config.precision;
  if (!op_breakdown.is_null()) j["op_breakdown"] = op_breakdown;
  if (!trace.is_null() && !trace.empty()) {
    j["trace"] = trace;
    j["exposed_comm_ms"] = trace["exposed_comm_ms"];
  }
  j["losses"] = losses;
  j["last_loss"] = losses.empty() ? 0.0 : losses.back();
  j["chosen"] = nlohmann::json::array();
  for (const ChosenSetting& c : chosen) j["chosen"].push_back({{"key", c.key}, {"value", c.value}, {"why", c.reason}});
  j["config"] = config.to_json();
  return j;
}

// Note [Stopping on a signal]
// A signal reaches the ranks at slightly different moments, but they must stop after the same
// step, or one would wait forever in a collective. So each step all-reduces a "stop" flag, and
// the decision uses the reduced flag of the *previous* step, which every rank reads the same
// (on the GPU it arrives without a wait, with the step's loss).

namespace {

// " (buckets 1-2: 10.438, 25.166 MB)": what --early-bucket-mb made of buckets 1..count (or what a
// checkpoint restored there); "" without early buckets.
std::string early_bucket_sizes(const Reducer& reducer, size_t count) {
  const size_t last = std::min(count, reducer.buckets().size() - 1);
  if (last == 0) return "";
  std::ostringstream text;
  text.setf(std::ios::fixed);
  text.precision(3);
  text << " (bucket" << (last > 1 ? "s 1-" + std::to_string(last) : std::string(" 1")) << ": ";
  for (size_t b = 1; b <= last; ++b) text << (b > 1 ? ", " : "") << reducer.buckets()[b].bytes / 1048576.0;
  text << " MB)";
  return text.str();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

RunResult run_training(const TrainConfig& config, std::ostream& out) {
  return run_training(config, RankEnvironment{}, out);
}

RunResult run_training(const TrainConfig& user_config, const RankEnvironment& env, std::ostream& all_ranks_out) {
  // Only rank 0 reports; the others train quietly (their errors still reach stderr).
  std::ostream null_stream(nullptr);
  std::ostream& out = env.rank == 0 ? all_ranks_out : null_stream;
  ResolvedRun run = resolve_run(user_config, env, out);
  const Device device = parse_device(run.device);
  // The settings the program chooses (train/auto_settings.h), the same on every rank.
  TrainConfig config = user_config;
  const std::vector<ChosenSetting> chosen = choose_settings(detect_run_facts(env, device), &config);
  const bool data_parallel = env.world_size > 1 || config.ddp;
  const char* const needs_ddp = ": it needs data parallelism (--gpus N, --procs N, or --set ddp=true)";
  VITDDP_CHECK(config.update == "after-backward" || data_parallel, "update ", config.update, " places DDP's bucket "
               "updates", needs_ddp);
  VITDDP_CHECK(config.tail_bucket_mb == 0 || data_parallel, "tail-bucket-mb cuts DDP's last gradient buckets", needs_ddp);
  VITDDP_CHECK(config.early_bucket_mb.empty() || data_parallel, "early-bucket-mb sizes DDP's gradient buckets",
               needs_ddp);
  VITDDP_CHECK(config.hook == "allreduce" || data_parallel, "--hook ", config.hook, " compresses DDP's gradient buckets",
               needs_ddp);
  VITDDP_CHECK(config.transport != "host-copy" || (device.is_cuda() && data_parallel), "transport host-copy carries "
               "DDP's all-reduces: it needs GPU data parallelism (--gpus N, or --set ddp=true on a GPU)");
  out << describe_choices(chosen);
  configure_device(device, config);
  // Before any step, not after the run it would time.
  VITDDP_CHECK(!config.op_breakdown || device.is_cuda(), "--op-breakdown times CUDA kernels: it needs a GPU");
  VITDDP_CHECK(!config.cuda_graph || device.is_cuda(), "--cuda-graph replays CUDA work: it needs a GPU, not ", run.device);
  VITDDP_CHECK(config.steps > 0, "--steps must be positive");
  const int world = std::max(1, env.world_size);

  VisionTransformer model(run.model, config.seed);
  NamedTensors params = model.named_parameters();
  if (!config.init_from.empty()) load_named_tensors(read_safetensors(config.init_from), params, config.init_from);
  // bf16: mixed precision with f32 master weights in the arena (see ParamArena).
  const DType compute_dtype = config.precision == "bf16" ? DType::kBF16 : DType::kF32;
  ParamArena arena(params, device, compute_dtype);
  Ddp ddp = setup_ddp(config, env, device, arena);
  VITDDP_ASSERT((ddp.reducer != nullptr) == data_parallel, "setup_ddp made a reducer exactly for data parallelism");
  // The run's PowerSGD hook, whose state checkpoints carry; null without one.
  PowerSgdHook* const powersgd = ddp.reducer ? dynamic_cast<PowerSgdHook*>(&ddp.reducer->hook()) : nullptr;
  std::unique_ptr<Optimizer> optimizer =
      config.optimizer == "sgd"
          ? make_sgd(arena, SgdConfig{config.lr, config.momentum, config.weight_decay})
          : make_adamw(arena, AdamWConfig{config.lr, 0.9, 0.999, 1e-8, config.weight_decay});

  // Resume: the newest step whole on every rank, restored before the loader starts.
  int64_t start_step = 0;
  int64_t loader_start = 0;
  if (config.resume) {
    std::optional<std::string> found = find_latest_checkpoint(config.checkpoint_dir, env.rank, std::cerr);
    int64_t step = found ? checkpoint_step_of(*found) : 0;
    if (ddp.group) {  // the ranks agree on the oldest newest step
      Tensor all = Tensor::empty({world, 1}, DType::kF64, device.is_cuda() ? device : Device::cpu());
      ddp.group->allgather(Tensor::from_vector({static_cast<double>(step)}, {1}, DType::kF64).to(all.device()), all)->wait();
      for (double s : all.to_vector()) step = std::min<int64_t>(step, static_cast<int64_t>(s));
    }
    if (step > 0) {
      // PowerSGD state is expected where this run has the hook (a DDP run), not wherever --hook says so.
      CheckpointExpectations expect{run.model.name, run.model.parameter_count(), world, arena.master_views(),
                                    optimizer->name(), optimizer->state(), powersgd != nullptr};
      const std::string dir = config.checkpoint_dir + "/" + checkpoint_step_name(step);
      CheckpointState st = load_checkpoint(dir, env.rank, expect);
      const std::vector<std::string> changes = resume_setting_changes(st.config, config.to_json());
      if (!changes.empty()) {
        std::string list;
        for (const std::string& c : changes) list += (list.empty() ? "" : ", ") + c;
        out << "warning: resuming " << dir << " with settings its run did not have (" << list
            << "): training goes on, but not as the interrupted run would have\n";
      }
      restore_tensors(st.weights, arena.master_views(), "weights");
      if (arena.mixed_precision()) arena.flat_params().copy_(arena.flat_master());
      restore_tensors(st.optimizer_state, optimizer->state(), "optimizer state");
      optimizer->set_step_count(st.optimizer_steps);
      model.dropout_generator() = Generator(st.dropout_seed, st.dropout_counter);
      // The buckets first: the hook's per-bucket state is keyed by the saved ones.
      if (ddp.reducer && !st.buckets.empty()) ddp.reducer->restore_buckets(st.buckets);
      if (st.powersgd) {
        VITDDP_ASSERT(powersgd != nullptr, "a PowerSGD checkpoint for a run without the PowerSGD hook "
                      "(load_checkpoint checks that)");
        for (const auto& [index, b] : st.powersgd->buckets)
          VITDDP_CHECK(index < ddp.reducer->buckets().size() &&
                           (!b.error.defined() || b.error.numel() == ddp.reducer->buckets()[index].numel),
                       dir, ": its PowerSGD state does not fit this run's gradient buckets (bucket ", index,
                       "); resume with the --bucket-mb (and first-, early- and tail-bucket-mb) it was saved with");
        powersgd->state() = powersgd_state_on(*st.powersgd, device);
      }
      start_step = st.step;
      loader_start = st.loader_step;
      out << "resumed from " << dir << " (step " << st.step << ")\n";
    } else {
      out << "no checkpoint to resume from in " << config.checkpoint_dir << "; starting at step 1\n";
    }
  }
  const bool generate_on_gpu = config.data == "gpu";
  std::unique_ptr<Dataset> dataset;
  std::unique_ptr<DistributedSampler> sampler;
  if (!generate_on_gpu) {
    dataset = make_dataset(config, run.model);
    SamplerOptions sampler_options;
    sampler_options.dataset_size = dataset->size();
    sampler_options.seed = config.seed;
    sampler_options.rank = env.rank;
    sampler_options.world_size = world;
    sampler = std::make_unique<DistributedSampler>(sampler_options);
  }
  BatchSourceOptions source_options;
  source_options.device = device;
  source_options.batch_size = config.batch_size;
  source_options.workers = config.workers;
  source_options.seed = mix64(config.seed, static_cast<uint64_t>(env.rank));  // --data gpu: each rank its own
  source_options.generate_on_gpu = generate_on_gpu;
  source_options.image_shape = {run.model.in_channels, run.model.image_size, run.model.image_size};
  source_options.num_classes = run.model.num_classes;
  source_options.start_step = loader_start;
  std::unique_ptr<BatchSource> batches = make_batch_source(dataset.get(), sampler.get(), source_options);

  RunResult result;
  result.chosen = chosen;
  result.config = config;
  result.device = run.device;
  result.model = run.model;
  result.parameters = run.model.parameter_count();
  result.world_size = world;
  if (ddp.reducer) {
    out << "data parallel: " << world << (world == 1 ? " rank (" : " ranks (") << ddp.group->backend() << "), "
        << ddp.reducer->buckets().size() << " buckets of <= " << config.bucket_mb << " MB"
        << early_bucket_sizes(*ddp.reducer, config.early_bucket_mbs().size())
        << (ddp.reducer->tail_buckets() > 0 ? detail::concat(" (the last ", ddp.reducer->tail_buckets(), " of <= ",
                                                                     config.tail_bucket_mb, " MB)")
                                            : std::string())
        << ", hook "
        << ddp.reducer->hook().name() << (config.grad_as_bucket_view ? ", gradients as bucket views" : "")
        << (config.update == "next-forward" ? ", updates in the next forward" : "")
        << (config.update == "sharded" ? detail::concat(", updates in backward sharded over the ", world,
                                                         world == 1 ? " rank" : " ranks",
                                                         " (each its part of a bucket, the weights all-gathered)")
                                       : std::string());
    const size_t buckets = ddp.reducer->buckets().size(), in_ready_order = ddp.reducer->ready_order_launches();
    const size_t held = ddp.reducer->held_launches(), after_backward = buckets - in_ready_order - held;
    if (in_ready_order < buckets) {
      out << ", " << in_ready_order << " buckets launched in ready order";
      if (after_backward > 0) out << " and the rest after backward, the first layers' first";
      if (held > 0) out << (after_backward > 0 ? ", then the " : ", the ") << held << " held buckets last";
    }
    out << "\n";
  }
  const int64_t total = config.steps;
  // The steps the summary times: all but the first few of this process (set-up, GEMM tuning, the
  // graph's capture), and at least the last.
  const int64_t timed_first = std::min(start_step + config.untimed_steps, total - 1);
  out << "training " << run.model.name << " (" << result.parameters << " parameters) on " << run.device
      << ", batch " << config.batch_size << ", " << config.precision << ", " << total - start_step << " steps"
      << (start_step > 0 ? " (from step " + std::to_string(start_step + 1) + ")" : std::string()) << ", "
      << optimizer->name() << " lr " << config.lr << ", data " << config.data << "\n"
      << std::flush;

  Allocator& allocator = allocator_for(device);
  std::unique_ptr<StepClock> clock = make_step_clock(device, total, std::min(start_step, total));
  NonfiniteCheck nonfinite(arena);
  // Note [The non-finite scan in the update] (framework/optim/optimizer.h): skipping needs the
  // scan before the update; stopping finds a bad step in the update's own pass.
  const bool scan_in_update = config.nonfinite == "stop";
  if (scan_in_update)
    optimizer->set_nonfinite_report(nonfinite.flag());
  else
    optimizer->set_skip_flag(nonfinite.flag());
  // --update-in-forward: each bucket's update waits for the next forward's first use of its
  // parameters (Note [Updates in the next forward] in distributed/overlapped_update.cpp). A
  // step's non-finite report is then complete only after the next step's forward: the flag is
  // copied there, and the clock gets that copy.
  std::unique_ptr<OverlappedUpdate> overlapped;
  Tensor nonfinite_done;  // with `overlapped`: the last step's report, copied once its updates ran
  if (config.update == "next-forward") {
    overlapped = std::make_unique<OverlappedUpdate>(*ddp.reducer, *optimizer, arena, model);
    nonfinite_done = nonfinite.flag().clone();
  }
  // update sharded: each rank updates its part of each bucket, in backward (Note [Sharded updates]
  // in distributed/sharded_update.cpp).
  std::unique_ptr<ShardedUpdate> sharded;
  if (config.update == "sharded")
    sharded = std::make_unique<ShardedUpdate>(*ddp.reducer, *ddp.group, *optimizer, arena, nonfinite.flag());
  std::unique_ptr<UpdateInBackward> in_backward;
  if (sharded)
    in_backward = std::make_unique<UpdateInBackward>(*ddp.reducer, *optimizer, device, sharded.get());
  // Summed over ranks each step (DDP only; one process reads stop_signal() directly).
  Tensor stop_flag = ddp.group ? Tensor::zeros({1}, DType::kF32, device) : Tensor();
  std::shared_ptr<Work> stop_work;  // the step's stop-flag all-reduce, waited for when the step ends
  auto reduce_stop_flag = [&] {
    stop_flag.fill_(stop_signal() != 0 ? 1.0 : 0.0);
    stop_work = ddp.group->allreduce(stop_flag, ReduceOp::kSum);
  };
  auto wait_stop_flag = [&] {
    if (!stop_work) return;
    stop_work->wait();
    stop_work.reset();
  };
  // --trace: every step's phases and buckets (train/step_tracer.h); `tracing` is null when off.
  std::unique_ptr<StepTracer> tracer;
  if (!config.trace.empty()) {
    tracer = std::make_unique<StepTracer>(config.trace, env.rank, world, device, ddp.group.get());
    if (ddp.reducer) ddp.reducer->set_observer(tracer.get());
  }
  StepTracer* tracing = tracer.get();
  auto finish_trace = [&] {
    if (!tracer) return;
    if (ddp.reducer) ddp.reducer->set_observer(nullptr);
    tracing = nullptr;
    std::optional<RunStats> stats = tracer->finish(timed_first);
    tracer.reset();
    if (!stats) return;
    result.trace = trace_summary(*stats);
    print_trace_summary(result.trace, config.trace, out);
  };
  // Reports step s once its loss is known; on the GPU that is one step later (see StepClock).
  int64_t ended_through = start_step - 1;  // the last step the clock has ended
  auto nonfinite_of = [&](int64_t s) -> int64_t {
    if (!overlapped) return clock->nonfinite(s);
    // Step s's report is complete once its updates ran: copied in step s + 1, or, for the last
    // step ended, read now after applying them.
    if (s < ended_through) return clock->nonfinite(s + 1);
    overlapped->flush();
    return nonfinite.flag().to(Device::cpu()).data<int64_t>()[0];
  };
  auto report = [&](int64_t s) {
    double loss_value = clock->loss(s);
    const int64_t bad = nonfinite_of(s);
    if (bad != kNoNonfinite) {
      // A hook that made finite gradients non-finite says so.
      const std::string cause = ddp.reducer ? ddp.reducer->hook().explain_nonfinite(s - start_step) : "";
      const std::string where = "step " + std::to_string(s + 1) + " (rank " + std::to_string(env.rank) +
                                "): non-finite gradient in " + nonfinite.parameter_at(bad) + " (loss " +
                                std::to_string(loss_value) + ")" +
                                (scan_in_update ? "; the run stops before anything of this step is saved"
                                                : "; the update was not applied") +
                                (cause.empty() ? "" : "; " + cause);
      if (config.nonfinite == "stop")
        throw Error(where + ". --nonfinite skip skips such steps instead", ErrorKind::kNumeric);
      out << where << ": step skipped\n";
      ++result.skipped_steps;
    } else if (!std::isfinite(loss_value)) {
      throw Error("step " + std::to_string(s + 1) + ": loss is " + std::to_string(loss_value), ErrorKind::kNumeric);
    }
    result.losses.push_back(loss_value);
    if (config.print_every > 0 && (s % config.print_every == 0 || s == total - 1)) {
      double dt = clock->step_seconds(s, s)[0];
      out << "step " << std::setw(4) << s + 1 << "/" << total << (s < timed_first ? " (untimed)" : "")
          << "  loss " << std::fixed << std::setprecision(4) << loss_value << "  " << std::setprecision(1)
          << config.batch_size / dt << " img/s  " << std::setprecision(2) << dt * 1e3 << " ms" << std::defaultfloat
          << "\n"
          << std::flush;
    }
  };
  // Reports every step up to s not yet reported (each once).
  int64_t reported_through = start_step - 1;
  auto report_through = [&](int64_t s) {
    for (; reported_through < s; ++reported_through) report(reported_through + 1);
  };
  // One micro-batch's forward and backward; DDP reduces the gradients when `sync`.
  bool poison_loss = false;  // VITDDP_FAULT ...:nan
  // `loss_factor`: a device scalar the loss is multiplied by (--cuda-graph's, Note [A step as a CUDA graph]).
  auto forward_backward = [&](const Tensor& images, const Tensor& labels, bool sync, int64_t micro,
                              const Tensor& loss_factor) {
    TracedPhase forward_range(tracing, kTraceForward, NvtxColor::kForward);
    Tensor logits = model.forward(images.to(compute_dtype));
    // The loss runs in f32 whatever the compute dtype, as autocast does.
    Tensor loss = cross_entropy(cast(logits, DType::kF32), labels);
    forward_range.end();
    if (overlapped) {
      overlapped->flush();  // parameters the forward did not use, before backward rewrites their gradients
      if (micro == 0) nonfinite_done.copy_(nonfinite.flag());  // the last step's updates have all run
      // The stop request goes before this step's buckets on the communication stream, so that
      // waiting for it at the end of the step does not wait for them (Note [Stopping on a signal]).
      if (sync && ddp.group) reduce_stop_flag();
    }
    if (config.accumulate > 1) loss = scale(loss, 1.0 / static_cast<double>(config.accumulate));
    if (loss_factor.defined()) {
      loss = mul(loss, loss_factor);
    } else if (poison_loss) {
      loss = scale(loss, std::nan(""));
    }
    if (ddp.reducer) {
      ddp.reducer->set_sync(sync);
      ddp.reducer->prepare_for_backward();
    }
    {
      // The NVTX range covers the whole backward, the reducer's wait for the last buckets
      // included; the traced compute interval ends when backward's kernels are issued, so that
      // time the compute stream spends waiting for communication counts as exposed.
      TracedPhase phase(tracing, kTraceBackward, NvtxColor::kBackward);
      loss.backward();  // communication runs beside it (and, with updates in the next forward, beside that)
      arena.zero_stale_grads();  // parameters no gradient reached (usually none)
      phase.end_gpu();
      if (overlapped) {
        if (sync) overlapped->after_backward();
      } else if (in_backward && sync) {
        in_backward->after_backward();  // the step's updates are done (in stream order)
      } else if (ddp.reducer) {
        ddp.reducer->finalize();
      }
    }
    return loss.detach();
  };
  // --cuda-graph (Note [A step as a CUDA graph]): null when off or not possible for this run.
  std::unique_ptr<GraphedStep> graphed;
  if (config.cuda_graph) {
    const std::string why = cuda_graph_unsupported(config, total - std::min(start_step, total));
    if (why.empty())
      graphed = std::make_unique<GraphedStep>(start_step + kEagerStepsBeforeGraph, config.batch_size, device.index,
                                              ddp.group.get(),
                                              [&ddp] { return !ddp.reducer || ddp.reducer->hook().steady(); });
    else
      out << "cuda graph: off, every step runs eagerly: " << why << "\n";
  }
  // One optimizer step (`step`: its index, -1 for --op-breakdown's extra ones): `accumulate`
  // micro-batches, of which only the last communicates.
  int64_t step_images = 0;   // this rank's images in the last train_step (a file's last batch may be short)
  auto train_step = [&](int64_t step) {
    arena.mark_grads_stale();  // not zeroed: overwritten by the first gradient (Note [Gradients in place])
    step_images = 0;
    Tensor step_loss;
    for (int64_t micro = 0; micro < config.accumulate; ++micro) {
      const bool sync = micro + 1 == config.accumulate;
      Batch batch;
      {
        TracedPhase phase(tracing, "get batch", NvtxColor::kData);
        batch = batches->next();
      }
      step_images += batch.images.shape()[0];
      Tensor loss;
      // Outside the graph: the step count and the non-finite report's reset are the host's.
      if (in_backward && sync) in_backward->begin_step();
      if (graphed && graphed->takes(step, batch.images, batch.labels)) {
        const int64_t replays_before = graphed->replays();
        loss = graphed->run(step, batch.images, batch.labels, poison_loss,
                            [&](const Tensor& images, const Tensor& labels, const Tensor& loss_factor) {
                              return forward_backward(images, labels, /*sync=*/true, /*micro=*/0, loss_factor);
                            },
                            out);
        if (graphed->replays() > replays_before) {  // no host backward: the host's step state advances here
          if (in_backward) in_backward->replayed();
          if (ddp.reducer) ddp.reducer->hook().replayed();
        }
      } else {
        loss = forward_backward(batch.images, batch.labels, sync, micro, Tensor());
      }
      step_loss = step_loss.defined() ? add(step_loss, loss) : loss;
    }
    if (overlapped) return step_loss;   // the update runs in the next forward
    if (in_backward) return step_loss;  // it ran in backward
    TracedPhase phase(tracing, "optimizer step", NvtxColor::kOptimizer);
    // On every rank the same answer: the gradients are all-reduced.
    if (!scan_in_update) nonfinite.run();
    optimizer->step();  // skipped (on the device) when the check found a NaN or Inf, or reporting one
    return step_loss;
  };
  auto save = [&](int64_t steps_done) {
    if (overlapped) overlapped->flush();
    if (sharded) sharded->gather_state();  // every rank's master weights and state whole
    CheckpointState st;
    st.step = steps_done;
    st.config = config.to_json();
    st.model_name = run.model.name;
    st.parameter_count = run.model.parameter_count();
    st.world_size = world;
    st.rank = env.rank;
    st.dropout_seed = model.dropout_generator().seed();
    st.dropout_counter = model.dropout_generator().counter();
    st.loader_step = steps_done * config.accumulate;
    st.optimizer_name = optimizer->name();
    st.optimizer_steps = optimizer->step_count();
    st.weights = arena.master_views();
    st.optimizer_state = optimizer->state();
    if (ddp.reducer) {
      for (const BucketInfo& b : ddp.reducer->buckets()) st.buckets.push_back(b.params);
      if (powersgd) st.powersgd = powersgd->state();
    }
    CheckpointOptions options;
    options.keep = static_cast<int>(config.checkpoint_keep);
    const std::string dir = save_checkpoint(config.checkpoint_dir, st, options);
    out << "checkpoint: " << dir << "\n" << std::flush;
  };
  const StopSignalScope stop_signals;
  int64_t stopped_after = -1;
  bool told_rebuild = false;

  const auto [profile_first, profile_last] = config.profile_range();
  VITDDP_CHECK(profile_first == 0 || device.is_cuda(), "--profile-steps drives the CUDA profiler: it needs a GPU");
  int64_t timed_images = 0;
  for (int64_t step = start_step; step < total; ++step) {
#if VITDDP_WITH_CUDA
    if (step + 1 == profile_first) cuda::profiler_start();
#endif
    poison_loss = inject_fault(env.rank, step);
    if (step == timed_first) {
      allocator.reset_peak(device.index);
      if (graphed) graphed->reset_peak_memory();
    }
    if (tracing) tracing->begin_step(step);
    TracedRange step_range(tracing ? &tracing->recorder() : nullptr, nvtx_step_name(step + 1), NvtxColor::kStep,
                           env.rank, step);
    Tensor loss = train_step(step);
    if (step >= timed_first) timed_images += step_images;
    step_range.end();
    if (tracing) tracing->end_step();
    // See Note [Stopping on a signal]: this step's flag, reduced; the last step's decides.
    if (ddp.group && !overlapped) reduce_stop_flag();  // with `overlapped`, issued before backward
    wait_stop_flag();
    clock->end_step(step, loss, overlapped ? nonfinite_done : nonfinite.flag(), stop_flag);
    ended_through = step;
#if VITDDP_WITH_CUDA
    if (step + 1 == profile_last) cuda::profiler_stop();
#endif
    // Waits for step - 1, so its stop request is known. With `overlapped` a step's non-finite
    // report is copied in the next step, so steps are reported one later (a wait for the step
    // just issued would leave the GPU idle while the host issues the next), and step - 1's
    // communication may still run beside the step just issued.
    report_through(overlapped ? step - 2 : step - 1);
    if (tracing) tracing->read_completed_steps(overlapped ? 2 : 1);  // earlier steps have run
    if (ddp.reducer && ddp.reducer->rebuilds() > 0 && !told_rebuild) {
      out << "buckets rebuilt from the order gradients arrived in: " << ddp.reducer->buckets().size() << " buckets\n";
      told_rebuild = true;
    }
    const bool stopping = ddp.group ? step > start_step && clock->stop_requested(step - 1)
                                    : stop_signal() != 0;
    if (!config.checkpoint_dir.empty() &&
        (stopping || (config.checkpoint_every > 0 && (step + 1) % config.checkpoint_every == 0))) {
      // This step first: a non-finite one stops the run under --nonfinite stop before anything
      // is saved (PowerSGD updates its state in place then: Note [PowerSGD and skipped steps]).
      report_through(step);
      if (ddp.group) ddp.group->check_health();  // the step's collectives are done: none failed
      save(step + 1);
    }
    if (stopping) {
      stopped_after = step;
      break;
    }
  }
  const int64_t last_step = stopped_after >= 0 ? stopped_after : total - 1;
  report_through(last_step);
  if (graphed) out << "cuda graph: " << graphed->replays() << " step(s) replayed after the captured one\n";
  if (in_backward)
    out << "updates in backward: " << in_backward->issued_in_backward() << " bucket update(s) issued beside backward, "
        << in_backward->issued_after_backward() << " after it" << (graphed ? " (replays issue none: their updates are "
        "the captured step's)" : "") << "\n";
  if (powersgd && powersgd->buckets_compressed() > 0)
    out << "powersgd: " << powersgd->buckets_compressed() << " bucket compression(s) issued, "
        << powersgd->buckets_by_passes() << " with the products as passes, " << powersgd->buckets_settled_late()
        << " with the error settled a step late" << (graphed ? " (replays issue none: they repeat the captured step's)" : "")
        << "\n";
  finish_trace();
  if (overlapped) overlapped->flush();  // the last step's updates, before the weights are read or saved
  if (stopped_after >= 0) {
    out << "stopped by signal " << stop_signal() << " after step " << stopped_after + 1
        << (config.checkpoint_dir.empty() ? " (no --checkpoint-dir: nothing saved)" : "")
        << (config.save.empty() ? "" : "; --save " + config.save + " not written (the run did not finish)") << "\n";
    result.steps = stopped_after + 1 - start_step;
    result.first_step = start_step + 1;
    result.stopped_early = true;
    return result;
  }
  VITDDP_CHECK(start_step < total, "nothing to do: the checkpoint is at step ", start_step, " and the run has ", total,
               " steps (--steps)");
  // The run's weights, before --op-breakdown's two extra steps change them.
  if (!config.save.empty() && sharded) sharded->gather_state();  // on every rank: a collective
  if (!config.save.empty() && env.rank == 0) {
    if (ddp.group) ddp.group->check_health();  // the last step's collectives are done: none failed
    write_safetensors(config.save, arena.master_views());
    out << "saved weights to " << config.save << "\n";
  }
  if (config.op_breakdown) {
    // Its two extra steps are not reported like the others. Under --nonfinite stop their updates
    // run whatever the gradients hold, so each one's flag is read once it has run, before the
    // next step and before anything is saved (under skip a bad one was not applied).
    auto stop_if_bad = [&] {
      const int64_t bad = nonfinite.flag().to(Device::cpu()).data<int64_t>()[0];
      if (scan_in_update && bad != kNoNonfinite)
        throw Error("a step of --op-breakdown (rank " + std::to_string(env.rank) + "): non-finite gradient in " +
                        nonfinite.parameter_at(bad) + "; the run stops before anything is saved",
                    ErrorKind::kNumeric);
    };
    auto whole_step = [&] {  // with its updates applied, so that its flag can be read
      Tensor loss = train_step(-1);
      if (overlapped) overlapped->flush();
      wait_stop_flag();  // issued before its backward (not read: the run is ending)
      return loss;
    };
    result.op_breakdown = op_breakdown(whole_step, stop_if_bad, ddp.group.get(), out);
  }

  result.steps = total - start_step;
  result.first_step = start_step + 1;
  result.timed_steps = total - timed_first;
  result.untimed_steps = timed_first - start_step;
  result.seconds = clock->span_seconds(timed_first, total - 1);
  result.steps_per_s = static_cast<double>(result.timed_steps) / result.seconds;
  // The images the timed steps took (rank 0's, times the ranks: the sampler gives each rank as many),
  // not batch size x steps: a file dataset's last batch of an epoch may be short.
  result.images_per_s = static_cast<double>(timed_images) * world / result.seconds;
  result.median_step_ms = median(clock->step_seconds(timed_first, total - 1)) * 1e3;
  // With --cuda-graph the step's activations live in the graph's memory, beside the allocator's.
  result.peak_memory_mib =
      static_cast<double>(allocator.peak_bytes(device.index) + (graphed ? graphed->peak_memory_bytes() : 0)) / (1 << 20);
  result.loader_images_per_s = batches->loader_images_per_second();
  const Utilisation use = utilisation(result.images_per_s / world, run.model.training_flops_per_image(),
                                      gpu_name(device));
  result.gpu_peak_tflops = use.peak_tflops;
  result.achieved_tflops_per_gpu = use.tflops_per_gpu;
  result.mfu_pct = use.mfu_pct;

  out << "summary: " << run.model.name << " on " << (world > 1 ? std::to_string(world) + " ranks, rank 0 " : "") << run.device << " (" << config.precision << "): " << std::setprecision(4)
      << result.steps_per_s << " steps/s over " << result.timed_steps << " timed step(s) (after "
      << result.untimed_steps << " untimed), " << result.images_per_s << " img/s, median step " << result.median_step_ms
      << " ms, peak memory " << result.peak_memory_mib << " MiB, loss " << result.losses.front() << " -> "
      << result.losses.back() << ", " << std::setprecision(4) << result.achieved_tflops_per_gpu << " TFLOP/s"
      << (device.is_cuda() ? " per GPU" : " per process");
  if (result.mfu_pct)
    out << " (MFU " << std::setprecision(3) << *result.mfu_pct << "% of " << result.gpu_peak_tflops
        << " TFLOP/s, the GPU's dense bf16 peak)";
  if (!result.trace.is_null() && result.trace.contains("exposed_comm_ms"))  // --trace: the totals too
    out << ", all-reduce " << result.trace["comm_ms"].get<double>() << " ms/step of which exposed "
        << result.trace["exposed_comm_ms"].get<double>() << " (overlap " << result.trace["overlap_pct"].get<double>()
        << "%)";
  out << "\n";
  return result;
}

}  // namespace vitddp
