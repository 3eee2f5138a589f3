#include "distributed/sharded_update.h"

#include "distributed/bucket_shard.h"
#include "framework/core/error.h"

namespace vitddp {

// Note [Sharded updates]
// With a plain all-reduce every rank receives every averaged gradient and runs the same update
// over all the weights: on 2 H200s in bf16 that update is ~0.9 ms of a ~10 ms ViT-L/32 step, done
// twice over. Here (ZeRO stage 1, as PyTorch's ZeroRedundancyOptimizer beside DDP) each bucket
// is reduce-scattered instead: rank r receives the average of its part only (BucketShard's
// [r * part, (r + 1) * part), the remainder of fewer than world elements all-reduced), updates
// that part, and the ranks all-gather the updated weights the forward reads (the 16-bit copy in
// mixed precision, else the f32 weights). The bytes on the link are those of the all-reduce,
// which is a reduce-scatter then an all-gather of the same parts; the update's memory traffic
// is divided by the world size. Each bucket's update and gather follow its reduce-scatter on
// UpdateInBackward's update stream, beside the rest of backward.
//
// What stays per rank: the f32 master weights and the optimizer state outside a rank's parts
// are not updated there; gather_state() makes them whole before they are read (a checkpoint, the
// final --save). The parts follow the buckets, so the buckets must not change while sharded: the
// step that may rebuild them all-reduces and updates every weight (begin_step(false)), which
// also leaves every rank with the same master weights to start from.
// The update is elementwise and a 2-rank average is a sum of two terms: the weights are
// bit-identical to the plain update's with 2 ranks (with more, NCCL may add in another order).
// The non-finite report: each rank's update finds the first bad element of its own part only,
// so the ranks take the minimum (an int64 all-reduce) before anyone reads it, and every rank
// stops at the same step. A skip (--nonfinite skip) would need every gradient scanned before any
// update: refused, as for --update-in-backward.
ShardedUpdate::ShardedUpdate(Reducer& reducer, ProcessGroup& group, Optimizer& optimizer, const ParamArena& arena,
                             Tensor nonfinite_report)
    : reducer_(reducer),
      group_(group),
      optimizer_(optimizer),
      arena_(arena),
      report_(std::move(nonfinite_report)),
      hook_([&]() -> ReduceScatterHook& {
        auto* hook = dynamic_cast<ReduceScatterHook*>(&reducer.hook());
        VITDDP_CHECK(hook, "ShardedUpdate: the reducer's hook is ", reducer.hook().name(),
                     ", not the reduce-scatter hook (--shard-update needs --hook allreduce)");
        return *hook;
      }()) {
  // Checked here, not at the first checkpoint: gather_state() gathers each state tensor by parts.
  for (auto& [name, t] : optimizer_.state())
    VITDDP_ASSERT(t.numel() == arena_.numel(), "optimizer state ", name, " is ", t.description(),
                  ", not one value per arena element");
}

std::pair<int64_t, int64_t> ShardedUpdate::range_of(size_t bucket) const {
  VITDDP_CHECK(reducer_.buckets()[bucket].is_view, "ShardedUpdate: bucket ", bucket,
               " is not a view of the gradient buffer (--shard-update needs --grad-as-bucket-view)");
  return reducer_.flat_ranges(bucket).front();
}

void ShardedUpdate::begin_step(bool scatter) {
  VITDDP_ASSERT(gathers_.empty(), "begin_step() before the last step's finish_step()");
  // Before any collective of the step, on every rank alike (the ranks share their buckets):
  // buckets rebuilt or restored as copies cannot be updated in place.
  if (scatter)
    for (size_t b = 0; b < reducer_.buckets().size(); ++b) range_of(b);
  hook_.set_scatter(scatter);
}

std::shared_ptr<Work> ShardedUpdate::gather(const Tensor& flat, size_t bucket) {
  const auto [begin, end] = range_of(bucket);
  const BucketShard shard = bucket_shard(end - begin, group_.size());
  if (shard.part == 0) return nullptr;
  const Tensor own = flat.as_strided({shard.part}, {1}, flat.storage_offset() + begin + shard.own_begin(group_.rank()));
  const Tensor all = flat.as_strided({group_.size(), shard.part}, {shard.part, 1}, flat.storage_offset() + begin);
  return group_.allgather(own, all);
}

void ShardedUpdate::update(size_t bucket) {
  // UpdateInBackward updates buckets in backward only in scattered steps (begin_step(true)).
  VITDDP_ASSERT(hook_.scatters(), "update() of bucket ", bucket, " in a step that all-reduces");
  const auto [begin, end] = range_of(bucket);
  const BucketShard shard = bucket_shard(end - begin, group_.size());
  const int64_t own = begin + shard.own_begin(group_.rank());
  if (shard.part > 0) optimizer_.update(own, own + shard.part);
  if (shard.has_rest()) optimizer_.update(begin + shard.rest_begin, end);
  if (std::shared_ptr<Work> work = gather(arena_.flat_params(), bucket)) gathers_.push_back(std::move(work));
  ++sharded_updates_;
}

void ShardedUpdate::finish_step() {
  VITDDP_ASSERT(hook_.scatters(), "finish_step() of a step that all-reduces");
  if (report_.defined()) group_.allreduce(report_, ReduceOp::kMin)->wait();
  for (auto& work : gathers_) work->wait();
  gathers_.clear();
}

void ShardedUpdate::gather_state() {
  VITDDP_ASSERT(gathers_.empty(), "gather_state() inside a step");
  // In f32 the master weights are the weights the forward reads, gathered every step.
  std::vector<Tensor> flats;
  if (arena_.mixed_precision()) flats.push_back(arena_.flat_master());
  for (auto& [name, t] : optimizer_.state()) flats.push_back(t);
  std::vector<std::shared_ptr<Work>> works;
  for (size_t b = 0; b < reducer_.buckets().size(); ++b)
    for (const Tensor& flat : flats)
      if (std::shared_ptr<Work> work = gather(flat, b)) works.push_back(std::move(work));
  for (auto& work : works) work->wait_on_host();
}

}  // namespace vitddp
