#include "distributed/update/sharded.h"

#include "distributed/update/bucket_shard.h"
#include "framework/core/error.h"
#include "framework/core/nvtx.h"
#include "framework/optim/grad_clip.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/stream.h"
#endif

namespace vitddp {

// Note [Sharded updates]
// Decision: with a plain all-reduce every rank receives every averaged gradient and runs the same
// update over all the weights. Here (ZeRO stage 1, as PyTorch's ZeroRedundancyOptimizer beside
// DDP) each bucket is reduce-scattered: rank r receives the average of its part only
// (BucketShard's [r * part, (r + 1) * part), a remainder of fewer than world elements
// all-reduced), updates that part, and the ranks all-gather the updated weights the forward reads
// (the 16-bit copy in mixed precision, else the f32 weights). The link carries the all-reduce's
// bytes; the update's memory traffic is divided by the world size, and it runs on a stream of its
// own beside backward, below the compute streams' priority (Note [Stream priorities] in
// framework/cuda/stream.h). Invariants: master weights and optimizer state outside a rank's parts
// are stale until gather_state(); the step that may rebuild the buckets updates plainly; a 2-rank
// average is a sum of two terms, so the weights are the plain update's bit for bit on two ranks;
// the ranks take the minimum of their non-finite reports.

// Note [Updates beside backward]
// A parameter's gradient is ready when its AccumulateGrad node runs, after every node that reads
// the parameter has issued its kernels; the bucket's collective is ordered after those kernels by
// the process group's ready event, and the update stream waits for the collective (Work::wait).
// A bucket's update is enqueued when the next bucket launches, not at its own launch: waiting for
// a collective first finishes its enqueue with NCCL (Note [Finishing an enqueue later] in
// distributed/nccl/pg_nccl.cpp), which the next launch does anyway. Under a CUDA graph the updates
// are captured with the step; they read the step's constants (learning rate, bias corrections)
// from device memory, which begin_step() writes before the replay.

// Note [Clipping sharded updates]
// A clipped update needs the norm of the whole averaged gradient before any part is updated, so
// with a GradNormClip the buckets are not updated beside backward: once all are reduced, each
// rank sums the squares of its own parts (the all-reduced remainders counted by rank 0 only),
// the sums are all-reduced, and every part is updated with the one scale. The same norm as the
// plain update's, up to the order of the additions.
struct ShardedUpdate::Streams {
#if VITDDP_WITH_CUDA
  cuda::Stream update;
  cuda::Event done;
  cuda::Event joined;  // the compute stream, for the update stream to wait on
#endif
};

ShardedUpdate::ShardedUpdate(Reducer& reducer, ProcessGroup& group, Optimizer& optimizer, const ParamArena& arena,
                             Tensor report)
    : reducer_(reducer),
      group_(group),
      optimizer_(optimizer),
      arena_(arena),
      report_(std::move(report)),
      hook_([&]() -> ReduceScatterHook& {
        auto* hook = dynamic_cast<ReduceScatterHook*>(&reducer.hook());
        VITDDP_CHECK(hook, "ShardedUpdate: the reducer's hook is ", reducer.hook().name(),
                     ", not the reduce-scatter hook (update sharded needs --hook allreduce)");
        return *hook;
      }()) {
  // Checked here, not at the first checkpoint: flush() gathers each state tensor by parts.
  for (auto& [name, t] : optimizer_.state())
    VITDDP_ASSERT(t.numel() == arena_.numel(), "optimizer state ", name, " is ", t.description(),
                  ", not one value per arena element");
  if (arena.device().is_cuda()) {
#if VITDDP_WITH_CUDA
    streams_ = std::make_unique<Streams>();
    // Below the compute streams: the updates take the SMs backward leaves idle.
    streams_->update = cuda::Stream::create(arena.device().index, cuda::background_priority());
    streams_->done = cuda::Event::create();
    streams_->joined = cuda::Event::create();
#else
    throw Error("sharded updates on a GPU need a CUDA build");
#endif
  }
  reducer_.set_launch_listener([this](size_t bucket) { launched(bucket); });
}

ShardedUpdate::~ShardedUpdate() { reducer_.set_launch_listener(nullptr); }

std::pair<int64_t, int64_t> ShardedUpdate::range_of(size_t bucket) const {
  VITDDP_CHECK(reducer_.buckets()[bucket].is_view, "ShardedUpdate: bucket ", bucket,
               " is not a view of the gradient buffer (update sharded needs grad-as-bucket-view)");
  return reducer_.flat_ranges(bucket).front();
}

void ShardedUpdate::begin_step() {
  VITDDP_CHECK(!stepping_, "ShardedUpdate: begin_step() twice without after_backward()");
  VITDDP_ASSERT(gathers_.empty(), "begin_step() before the last step's finish_step()");
  optimizer_.begin_step();
  stepping_ = true;
  // The step that may rebuild the buckets updates every weight plainly (Note [Bucket rebuild]).
  const bool scatter = !reducer_.rebuild_pending();
  // Before any collective of the step, on every rank alike (the ranks share their buckets):
  // buckets rebuilt or restored as copies cannot be updated in place.
  if (scatter)
    for (size_t b = 0; b < reducer_.buckets().size(); ++b) range_of(b);
  hook_.set_scatter(scatter);
  lagging_.reset();
}

void ShardedUpdate::launched(size_t bucket) {
  if (!stepping_ || !scatters() || optimizer_.grad_clip()) return;  // Note [Clipping sharded updates]
  if (lagging_) {
    update(*lagging_);
    ++(finishing_ ? issued_after_backward_ : issued_in_backward_);
  }
  lagging_ = bucket;
}

void ShardedUpdate::replayed() {
  VITDDP_CHECK(stepping_ && scatters() && !lagging_, "ShardedUpdate: replayed() for a step that did not begin with "
               "begin_step() or that did not update in backward");
  stepping_ = false;
}

void ShardedUpdate::after_backward(bool sync) {
  if (!sync) {  // an accumulation micro-batch: nothing was launched
    reducer_.finalize();
    return;
  }
  VITDDP_CHECK(stepping_, "ShardedUpdate: after_backward() without begin_step()");
  if (!scatters()) {  // this step may rebuild the buckets: the plain order
    stepping_ = false;
    reducer_.finalize();
    if (GradNormClip* clip = optimizer_.grad_clip()) clip->measure_all();
    optimizer_.update(0, optimizer_.size());
    issued_after_backward_ += reducer_.buckets().size();
    return;
  }
  // Launches the buckets of unused parameters, if any: launched() still updates each one.
  finishing_ = true;
  try {
    reducer_.finalize_deferred();
  } catch (...) {
    finishing_ = stepping_ = false;
    throw;
  }
  finishing_ = stepping_ = false;
  if (optimizer_.grad_clip()) clip_and_update_all();
  if (lagging_) {
    update(*lagging_);
    ++issued_after_backward_;
  }
  lagging_.reset();
  {
#if VITDDP_WITH_CUDA
    std::optional<cuda::StreamGuard> on_update;
    if (streams_) on_update.emplace(streams_->update.get());
#endif
    finish_step();  // the update stream waits for the gathers and the report's consensus
  }
#if VITDDP_WITH_CUDA
  if (streams_) {
    streams_->done.record(streams_->update.get());
    streams_->done.block(cuda::current_stream());
  }
#endif
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
  VITDDP_ASSERT(hook_.scatters(), "update() of bucket ", bucket, " in a step that all-reduces");
  NvtxRange range(nvtx_update_name(static_cast<int>(bucket)), NvtxColor::kOptimizer);
#if VITDDP_WITH_CUDA
  std::optional<cuda::StreamGuard> on_update;
  if (streams_) on_update.emplace(streams_->update.get());
#endif
  reducer_.wait_bucket(bucket);  // on the GPU the update stream waits, not the host
  const auto [begin, end] = range_of(bucket);
  const BucketShard shard = bucket_shard(end - begin, group_.size());
  const int64_t own = begin + shard.own_begin(group_.rank());
  if (shard.part > 0) optimizer_.update(own, own + shard.part);
  if (shard.has_rest()) optimizer_.update(begin + shard.rest_begin, end);
  if (std::shared_ptr<Work> work = gather(arena_.flat_params(), bucket)) gathers_.push_back(std::move(work));
  ++sharded_updates_;
}

void ShardedUpdate::clip_and_update_all() {
  GradNormClip& clip = *optimizer_.grad_clip();
  {
#if VITDDP_WITH_CUDA
    std::optional<cuda::StreamGuard> on_update;
    if (streams_) {
      // The update stream follows the compute stream before its first kernel here: under a
      // capture, a stream that has not waited on a captured one runs its kernels at once
      // instead of recording them, and the replays would not reset the sum of squares.
      streams_->joined.record(cuda::current_stream());
      streams_->joined.block(streams_->update.get());
      on_update.emplace(streams_->update.get());
    }
#endif
    clip.begin();
    for (size_t b = 0; b < reducer_.buckets().size(); ++b) {
      reducer_.wait_bucket(b);
      const auto [begin, end] = range_of(b);
      const BucketShard shard = bucket_shard(end - begin, group_.size());
      const int64_t own = begin + shard.own_begin(group_.rank());
      clip.add_squares(own, own + shard.part);
      if (shard.has_rest() && group_.rank() == 0) clip.add_squares(begin + shard.rest_begin, end);
    }
    group_.allreduce(clip.sum_of_squares(), ReduceOp::kSum)->wait();
    clip.finish();
  }
  for (size_t b = 0; b < reducer_.buckets().size(); ++b) {
    update(b);
    ++issued_after_backward_;
  }
}

void ShardedUpdate::finish_step() {
  VITDDP_ASSERT(hook_.scatters(), "finish_step() of a step that all-reduces");
  if (report_.defined()) group_.allreduce(report_, ReduceOp::kMin)->wait();
  for (auto& work : gathers_) work->wait();
  gathers_.clear();
}

std::string ShardedUpdate::summary() const {
  return "updates in backward: " + std::to_string(issued_in_backward_) + " bucket update(s) issued beside backward, " +
         std::to_string(issued_after_backward_) + " after it";
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
