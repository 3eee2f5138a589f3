#include "train/ddp_wiring.h"

#include <chrono>

#include "distributed/comm_hook.h"
#include "distributed/hooks/powersgd.h"
#include "distributed/hooks/reduce_scatter.h"
#include "framework/core/random.h"

namespace vitddp {
namespace {

// Every rank must have built the same parameters (names, shapes, dtypes): compare a hash.
void check_same_model(ProcessGroup& group, const ParamArena& arena, Device device) {
  uint64_t h = 0x5eed;
  for (const auto& [name, t] : arena.named_params()) {
    for (char c : name) h = mix64(h, static_cast<uint64_t>(c));
    for (int64_t d : t.shape()) h = mix64(h, static_cast<uint64_t>(d));
    h = mix64(h, static_cast<uint64_t>(t.dtype()));
  }
  // 63 bits, as an i64 value that every backend moves unchanged.
  Tensor mine = Tensor::from_vector_i64({static_cast<int64_t>(h >> 1)}, {1}).to(device);
  Tensor all = Tensor::empty({group.size(), 1}, DType::kI64, device);
  group.allgather(mine, all)->wait();
  std::vector<double> hashes = all.to_vector();
  for (int r = 0; r < group.size(); ++r)
    VITDDP_CHECK(hashes[r] == hashes[0], "rank ", r, " built a different model than rank 0 (parameter names, shapes or ",
                 "dtypes differ): every rank must get the same --model and dimension flags");
}

std::unique_ptr<CommHook> make_hook(const TrainConfig& config) {
  // Sharded updates: the all-reduce hook that reduce-scatters when ShardedUpdate says so.
  if (config.hook == "allreduce" && config.update == "sharded") return std::make_unique<ReduceScatterHook>();
  if (config.hook == "allreduce") return make_allreduce_hook();
  if (config.hook == "fp16") return make_cast_compress_hook(DType::kF16);
  if (config.hook == "bf16") return make_cast_compress_hook(DType::kBF16);
  PowerSgdOptions options;
  options.rank = config.powersgd_rank;
  options.start_iter = config.powersgd_start_iter;
  options.seed = config.seed;
  options.error_in_bucket_dtype = config.powersgd_error_dtype == "bucket";
  // Only a skipped step must leave the state as it was (Note [PowerSGD and skipped steps]).
  options.stage_state = config.nonfinite == "skip";
  return make_powersgd_hook(options);
}

bool ddp_runs(const TrainConfig& config, const RankEnvironment& env) { return env.world_size > 1 || config.ddp; }

}  // namespace

Ddp setup_ddp(const TrainConfig& config, const RankEnvironment& env, Device device, ParamArena& arena) {
  Ddp ddp;
  VITDDP_CHECK(config.transport != "host-copy" || (device.is_cuda() && ddp_runs(config, env)),
               "transport host-copy carries DDP's all-reduces: it needs GPU data parallelism (--gpus N, or --set ddp=true "
               "on a GPU)");
  // One process takes the same path with --ddp: a group of one (NCCL or Gloo, whose collectives
  // then complete at once) and the reducer with its hooks, as PyTorch's DDP wrapper on one GPU.
  if (!ddp_runs(config, env)) return ddp;
  ProcessGroupOptions options;
  options.rank = env.rank;
  options.world_size = env.world_size;
  options.rendezvous = env.rendezvous;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(config.timeout * 1000));
  options.host_copy_allreduce = config.transport == "host-copy";  // Note [Host-copy all-reduce]
  options.host_copy_overlap = config.host_copy_overlap;      // Note [Back-to-back host copies]
  options.host_copy_reduce_beside = config.host_copy_reduce_beside;  // Note [Reductions beside the copies]
  ddp.group = device.is_cuda() ? make_nccl_process_group(options) : make_gloo_process_group(options);
  check_same_model(*ddp.group, arena, device);
  // Every rank starts from rank 0's weights (the master; the 16-bit copy follows it). The host
  // waits for them too: at the start there is nothing to overlap, and the run then makes the
  // rest of its CUDA objects (pinned buffers, cuBLASLt handles and workspaces) with no
  // collective in flight (docs/performance.md, "Copy engines for the shared-memory transport").
  ddp.group->broadcast(arena.flat_master(), 0)->wait_on_host();
  if (arena.mixed_precision()) arena.flat_params().copy_(arena.flat_master());

  std::vector<ReducerParam> params;
  for (size_t i = 0; i < arena.size(); ++i)
    params.push_back({arena.named_params()[i].first, arena.named_params()[i].second, arena.offset_of(i)});
  ReducerOptions options_r;
  options_r.bucket_cap_bytes = static_cast<size_t>(config.bucket_mb * (1 << 20));
  options_r.first_bucket_cap_bytes = static_cast<size_t>(std::min(config.first_bucket_mb, config.bucket_mb) * (1 << 20));
  options_r.tail_bucket_cap_bytes = static_cast<size_t>(config.tail_bucket_mb * (1 << 20));
  for (double mb : config.early_bucket_mbs())
    options_r.early_bucket_cap_bytes.push_back(std::max<size_t>(1, static_cast<size_t>(mb * (1 << 20))));
  options_r.find_unused_parameters = config.find_unused_parameters;
  options_r.grad_as_bucket_view = config.grad_as_bucket_view;
  options_r.ready_order_share = config.ready_order_share;
  options_r.held_buckets = static_cast<size_t>(config.held_buckets);
  ddp.reducer = std::make_unique<Reducer>(params, arena.flat_grads(), *ddp.group, make_hook(config), options_r);
  Reducer* reducer = ddp.reducer.get();
  for (size_t i = 0; i < arena.size(); ++i)
    Tensor(arena.named_params()[i].second).register_grad_ready_hook([reducer, i](const Tensor&) { reducer->mark_ready(i); });
  return ddp;
}

}  // namespace vitddp
