#include "distributed/ddp.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "distributed/hooks/reduce_scatter.h"
#include "distributed/update/next_forward.h"
#include "distributed/update/sharded.h"
#include "framework/core/error.h"
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
                 "dtypes differ): every rank must get the same --model and dimension settings");
}

std::unique_ptr<CommHook> make_hook(const DdpOptions& o) {
  switch (o.hook) {
    case HookKind::kAllReduce:
      // Sharded updates: the all-reduce hook that reduce-scatters when ShardedUpdate says so.
      if (o.update == UpdatePlacement::kSharded) return std::make_unique<ReduceScatterHook>();
      return make_allreduce_hook();
    case HookKind::kFp16: return make_cast_compress_hook(DType::kF16);
    case HookKind::kBf16: return make_cast_compress_hook(DType::kBF16);
    case HookKind::kPowerSgd: return make_powersgd_hook(o.powersgd);
  }
  throw Error("unknown hook");
}

// " (buckets 1-2: 10.438, 25.166 MB)": what the early caps made of buckets 1..count (or what a
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

// A cap in MB to three decimals, as it was given ("0.05", "25", "2000").
double cap_mb(size_t bytes) { return std::round(static_cast<double>(bytes) / (1 << 20) * 1000) / 1000; }

}  // namespace

HookKind parse_hook_kind(const std::string& name) {
  if (name == "allreduce") return HookKind::kAllReduce;
  if (name == "fp16") return HookKind::kFp16;
  if (name == "bf16") return HookKind::kBf16;
  if (name == "powersgd") return HookKind::kPowerSgd;
  throw Error("unknown hook '" + name + "' (allreduce, fp16, bf16, powersgd)");
}

DistributedDataParallel::DistributedDataParallel(ParamArena& arena, Module& model, Optimizer& optimizer, Tensor report,
                                                 const DdpOptions& options)
    : placement_(options.update), options_(options) {
  const Device device = arena.device();
  VITDDP_CHECK(!options.group.host_copy_allreduce || device.is_cuda(), "transport host-copy carries DDP's all-reduces "
               "through the copy engines: it needs a GPU");
  // One process takes the same path: a group of one (NCCL or Gloo, whose collectives then
  // complete at once) and the reducer with its hooks, as PyTorch's DDP wrapper on one GPU.
  group_ = device.is_cuda() ? make_nccl_process_group(options.group) : make_gloo_process_group(options.group);
  check_same_model(*group_, arena, device);
  // Every rank starts from rank 0's weights (the master; the 16-bit copy follows it). The host
  // waits for them too: at the start there is nothing to overlap, and the run then makes the
  // rest of its CUDA objects (pinned buffers, cuBLASLt handles and workspaces) with no
  // collective in flight.
  group_->broadcast(arena.flat_master(), 0)->wait_on_host();
  if (arena.mixed_precision()) arena.flat_params().copy_(arena.flat_master());

  std::vector<ReducerParam> params;
  for (size_t i = 0; i < arena.size(); ++i)
    params.push_back({arena.named_params()[i].first, arena.named_params()[i].second, arena.offset_of(i)});
  reducer_ = std::make_unique<Reducer>(params, arena.flat_grads(), *group_, make_hook(options), options.buckets);
  Reducer* reducer = reducer_.get();
  for (size_t i = 0; i < arena.size(); ++i)
    Tensor(arena.named_params()[i].second).register_grad_ready_hook([reducer, i](const Tensor&) { reducer->mark_ready(i); });

  switch (placement_) {
    case UpdatePlacement::kAfterBackward:
      schedule_ = std::make_unique<UpdateAfterBackward>(*reducer_, optimizer);
      break;
    case UpdatePlacement::kNextForward:
      schedule_ = std::make_unique<NextForwardUpdate>(*reducer_, optimizer, arena, model, report);
      break;
    case UpdatePlacement::kSharded:
      schedule_ = std::make_unique<ShardedUpdate>(*reducer_, *group_, optimizer, arena, report);
      break;
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  schedule_.reset();  // it holds the reducer's listener and the model's pre-hook
}

void DistributedDataParallel::begin_backward(int64_t micro, bool sync) {
  schedule_->before_backward(micro);
  reducer_->set_sync(sync);
  reducer_->prepare_for_backward();
}

void DistributedDataParallel::replayed() {
  schedule_->replayed();
  reducer_->hook().replayed();
}

PowerSgdHook* DistributedDataParallel::powersgd() { return dynamic_cast<PowerSgdHook*>(&reducer_->hook()); }

std::string DistributedDataParallel::describe() const {
  const Reducer& r = *reducer_;
  const int world = group_->size();
  std::ostringstream out;
  out << world << (world == 1 ? " rank (" : " ranks (") << group_->backend() << "), " << r.buckets().size()
      << " buckets of <= " << cap_mb(options_.buckets.bucket_cap_bytes) << " MB"
      << early_bucket_sizes(r, options_.buckets.early_bucket_cap_bytes.size());
  if (r.tail_buckets() > 0)
    out << " (the last " << r.tail_buckets() << " of <= "
        << cap_mb(options_.buckets.tail_bucket_cap_bytes) << " MB)";
  out << ", hook " << r.hook().name() << (options_.buckets.grad_as_bucket_view ? ", gradients as bucket views" : "");
  if (placement_ == UpdatePlacement::kNextForward) out << ", updates in the next forward";
  if (placement_ == UpdatePlacement::kSharded)
    out << ", updates in backward sharded over the " << world << (world == 1 ? " rank" : " ranks")
        << " (each its part of a bucket, the weights all-gathered)";
  const size_t buckets = r.buckets().size(), in_ready_order = r.ready_order_launches();
  const size_t held = r.held_launches(), after_backward = buckets - in_ready_order - held;
  if (in_ready_order < buckets) {
    out << ", " << in_ready_order << " buckets launched in ready order";
    if (after_backward > 0) out << " and the rest after backward, the first layers' first";
    if (held > 0) out << (after_backward > 0 ? ", then the " : ", the ") << held << " held buckets last";
  }
  return out.str();
}

}  // namespace vitddp
