#include "train/run_setup.h"

#include <chrono>
#include <ostream>

#include "data/batch_mixing.h"
#include "framework/core/devices.h"
#include "framework/core/random.h"
#include "framework/io/safetensors.h"
#include "train/checkpoint/run_state.h"
#include "train/cpu_allreduce_choice.h"
#include "train/dataset_factory.h"
#include "train/device_choice.h"
#include "train/device_setup.h"
#include "train/observe/slow_rank.h"
#include "train/run_facts.h"

namespace vitddp {
namespace {

VitConfig model_config(const TrainConfig& c, bool on_gpu) {
  std::string name = c.model == "auto" ? (on_gpu ? "vit_l_32" : "vit_tiny") : c.model;
  VitConfig m = vit_config_by_name(name);
  auto override_dim = [](int64_t setting, int64_t& field) {
    if (setting > 0) field = setting;
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

// Settings that only data parallelism acts on, refused before anything is made (one line, and
// before the start line says what was chosen).
void check_data_parallel_settings(const TrainConfig& c, bool data_parallel, const Device& device) {
  const char* const needs = ": it needs data parallelism (--gpus N, --procs N, or --set ddp=true)";
  VITDDP_CHECK(c.update == "after-backward" || data_parallel, "update ", c.update, " places DDP's bucket updates", needs);
  VITDDP_CHECK(c.tail_bucket_mb == 0 || data_parallel, "tail-bucket-mb cuts DDP's last gradient buckets", needs);
  VITDDP_CHECK(c.early_bucket_mb.empty() || data_parallel, "early-bucket-mb sizes DDP's gradient buckets", needs);
  VITDDP_CHECK(c.hook == "allreduce" || data_parallel, "--hook ", c.hook, " compresses DDP's gradient buckets", needs);
  VITDDP_CHECK(c.cpu_allreduce == "gloo" || (data_parallel && !device.is_cuda()), "cpu-allreduce ", c.cpu_allreduce,
               " sums the buckets of CPU processes: it needs --procs N");
  VITDDP_CHECK(c.transport != "host-copy" || (device.is_cuda() && data_parallel), "transport host-copy carries DDP's "
               "all-reduces: it needs GPU data parallelism (--gpus N, or --set ddp=true on a GPU)");
  VITDDP_CHECK(!c.op_breakdown || device.is_cuda(), "--op-breakdown times CUDA kernels: it needs a GPU");
  VITDDP_CHECK(!c.cuda_graph || device.is_cuda(), "--cuda-graph replays CUDA work: it needs a GPU, not ", device.str());
  VITDDP_CHECK(c.profile_range().first == 0 || device.is_cuda(), "--profile-steps drives the CUDA profiler: it needs a "
               "GPU");
}

size_t mb_bytes(double mb) { return static_cast<size_t>(mb * (1 << 20)); }

LrScheduleConfig schedule_config(const TrainConfig& c) {
  LrScheduleConfig s;
  s.kind = c.lr_schedule;
  s.base_lr = c.lr;
  s.total_steps = c.steps;
  s.warmup_steps = c.warmup_steps;
  s.warmup_decay = c.warmup_decay;
  s.min_lr = c.min_lr;
  s.step_size = c.lr_step_size;
  s.gamma = c.lr_gamma;
  return s;
}

// The optimizer with the recipe's decay mask, clip and EMA (before DDP: sharded updates gather
// every state tensor, the EMA's among them).
void set_up_optimizer(TrainingRun& run) {
  const TrainConfig& c = run.config;
  run.optimizer = c.optimizer == "sgd" ? make_sgd(*run.arena, SgdConfig{c.lr, c.momentum, c.weight_decay})
                                       : make_adamw(*run.arena, AdamWConfig{c.lr, 0.9, 0.999, 1e-8, c.weight_decay});
  run.schedule = std::make_unique<LrSchedule>(schedule_config(c));
  if (c.weight_decay > 0 && !c.weight_decay_all) {  // Note [Weight decay by parameter]
    std::vector<bool> decays;
    for (const auto& [name, p] : run.arena->named_params())
      decays.push_back(VisionTransformer::decays_by_default(name, p.shape()));
    run.optimizer->set_weight_decay_mask(decays);
  }
  if (c.clip_grad_norm > 0) {
    run.clip = std::make_unique<GradNormClip>(*run.arena, c.clip_grad_norm);
    run.optimizer->set_grad_clip(run.clip.get());
  }
  if (c.model_ema > 0) run.optimizer->enable_ema(c.model_ema);
}

}  // namespace

DdpOptions ddp_options(const TrainConfig& c, const RankEnvironment& env) {
  DdpOptions o;
  o.group.rank = env.rank;
  o.group.world_size = env.world_size;
  o.group.rendezvous = env.rendezvous;
  o.group.timeout = std::chrono::milliseconds(static_cast<int64_t>(c.timeout * 1000));
  o.group.host_copy_allreduce = c.transport == "host-copy";  // Note [Host-copy all-reduce]
  o.group.host_copy_overlap = c.host_copy_overlap;           // Note [Back-to-back host copies]
  o.group.host_copy_reduce_beside = c.host_copy_reduce_beside;  // Note [Reductions beside the copies]
  o.group.cpu_allreduce = cpu_allreduce_from_name(c.cpu_allreduce);
  o.group.bypass_wait = std::chrono::duration<double>(c.bypass_wait_ms / 1000);
  apply_slow_rank_from_environment(o.group);
  o.buckets.bucket_cap_bytes = mb_bytes(c.bucket_mb);
  o.buckets.first_bucket_cap_bytes = mb_bytes(std::min(c.first_bucket_mb, c.bucket_mb));
  o.buckets.tail_bucket_cap_bytes = mb_bytes(c.tail_bucket_mb);
  for (double mb : c.early_bucket_mbs()) o.buckets.early_bucket_cap_bytes.push_back(std::max<size_t>(1, mb_bytes(mb)));
  o.buckets.find_unused_parameters = c.find_unused_parameters;
  o.buckets.grad_as_bucket_view = c.grad_as_bucket_view;
  o.buckets.ready_order_share = c.ready_order_share;
  o.buckets.held_buckets = static_cast<size_t>(c.held_buckets);
  o.hook = parse_hook_kind(c.hook);
  o.powersgd.rank = c.powersgd_rank;
  o.powersgd.start_iter = c.powersgd_start_iter;
  o.powersgd.seed = c.seed;
  o.powersgd.error_in_bucket_dtype = c.powersgd_error_dtype == "bucket";
  // Only a skipped step must leave the state as it was (Note [PowerSGD and skipped steps]).
  o.powersgd.stage_state = c.nonfinite == "skip";
  o.update = parse_update_placement(c.update);
  return o;
}

ResolvedRun resolve_run(const TrainConfig& c, const RankEnvironment& env, std::ostream& log) {
  const std::string device = choose_device(c, env, visible_gpu_count(), describe_visible_gpus, log);
  return {device, model_config(c, parse_device(device).is_cuda())};
}

TrainingRun set_up_run(const TrainConfig& user_config, const RankEnvironment& env, std::ostream& out) {
  TrainingRun run;
  run.env = env;
  run.world = std::max(1, env.world_size);
  const ResolvedRun resolved = resolve_run(user_config, env, out);
  run.device_name = resolved.device;
  run.device = parse_device(resolved.device);
  run.model_config = resolved.model;
  // The settings the program chooses (train/auto_settings.h), the same on every rank.
  run.config = user_config;
  run.chosen = choose_settings(detect_run_facts(env, run.device), &run.config);
  const TrainConfig& c = run.config;
  const bool data_parallel = env.world_size > 1 || c.ddp;
  check_data_parallel_settings(c, data_parallel, run.device);
  out << describe_choices(run.chosen);
  configure_device(run.device, c);

  run.model = std::make_unique<VisionTransformer>(run.model_config, c.seed);
  NamedTensors params = run.model->named_parameters();
  if (!c.init_from.empty()) load_named_tensors(read_safetensors(c.init_from), params, c.init_from);
  run.compute_dtype = c.precision == "bf16" ? DType::kBF16 : DType::kF32;
  run.arena = std::make_unique<ParamArena>(params, run.device, run.compute_dtype);
  set_up_optimizer(run);
  run.nonfinite = std::make_unique<NonfiniteCheck>(*run.arena);
  run.scan_in_update = c.nonfinite == "stop";
  if (run.scan_in_update)
    run.optimizer->set_nonfinite_report(run.nonfinite->flag());
  else
    run.optimizer->set_skip_flag(run.nonfinite->flag());
  if (data_parallel)
    run.ddp = std::make_unique<DistributedDataParallel>(*run.arena, *run.model, *run.optimizer,
                                                        run.scan_in_update ? run.nonfinite->flag() : Tensor(),
                                                        ddp_options(c, env));

  // Resume: the newest step whole on every rank, restored before the loader starts.
  const int64_t loader_start = c.resume ? resume_run(run, out) : 0;
  const bool generate_on_gpu = c.data == "gpu";
  if (!generate_on_gpu) {
    DataSource data = make_train_data(c, run.model_config, env.rank, run.world);
    run.dataset = std::move(data.dataset);
    run.order = std::move(data.order);
    run.classes = std::move(data.classes);
  }
  BatchSourceOptions source;
  source.device = run.device;
  source.batch_size = c.batch_size;
  source.workers = c.workers;
  source.seed = mix64(c.seed, static_cast<uint64_t>(env.rank));  // --data gpu: each rank its own
  source.seed_for_draws = c.seed;
  source.generate_on_gpu = generate_on_gpu;
  source.image_shape = {run.model_config.in_channels, run.model_config.image_size, run.model_config.image_size};
  source.num_classes = run.model_config.num_classes;
  source.start_step = loader_start;
  source.max_bad_samples = run.dataset ? bad_sample_allowance(c, *run.dataset) : 0;
  // Each rank its own draws, as each process of torchvision's reference script.
  if (c.mixup_alpha + c.cutmix_alpha > 0)
    source.mixing = std::make_shared<BatchMixing>(c.mixup_alpha, c.cutmix_alpha, run.model_config.num_classes,
                                                  mix64(mix64(c.seed, 0x6d6978696e67ULL), static_cast<uint64_t>(env.rank)));
  run.batches = make_batch_source(run.dataset.get(), run.order, source);
  return run;
}

}  // namespace vitddp
