#include "distributed/update_in_backward.h"

#include "framework/core/error.h"
#include "framework/core/nvtx.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/stream.h"
#endif

namespace vitddp {

// Note [Updates in backward]
// A plain DDP step ends with every bucket's all-reduce, then one optimizer pass over all the
// weights (0.9 ms of a 10 ms bf16 ViT-L/32 step on an H200), with the GPU's other work done.
// Here each bucket's update (Note [An update in ranges] in framework/optim/optimizer.h) is
// enqueued on an update stream right after its communication: the update stream waits for
// that bucket's collective (Work::wait, so a 16-bit hook's result lands first) and updates the
// bucket's range of the arena, while the compute stream goes on with backward. Only the last
// bucket's update is left after backward (with the buckets of unused parameters, if any, which
// launch there). After backward the compute stream waits for the update stream, so the next
// forward, a checkpoint or the clock's read of the non-finite report sees every update.
//
// Why updating a bucket during backward is safe: a parameter's gradient is ready when its
// AccumulateGrad node runs, after every node that reads the parameter has issued its kernels
// (a node runs when all its consumers in the graph have); the bucket's collective is ordered
// after those kernels through the process group's ready event (recorded on the compute stream
// at the launch), and the update after the collective.
// The update is the same, element by element, as finalize() + step(): bit-identical weights.
//
// A bucket's update is enqueued when the next bucket launches, not at its own launch: waiting
// for a collective first finishes its enqueue with NCCL (Note [Finishing an enqueue later] in
// pg_nccl.cpp), which the next launch does anyway; the last is enqueued by after_backward().
// The first synchronised step, whose finalize may rebuild the buckets (Note [Bucket rebuild]),
// updates after backward instead. What it asks: --nonfinite stop (each update reports into
// the flag; a skip needs every gradient scanned before any update), and hooks that
// communicate in the bucket itself (all-reduce; bf16 on bf16 buckets) or keep their buffers
// from step to step (PowerSGD, Note [PowerSGD's P buffers], whose expansion into the bucket
// then runs on the update stream, in the wait before the update): a hook's own buffer is
// freed where its last reference drops (the process group's, once the collective is done, on
// the compute stream), while the update stream may still read it.
// Under --cuda-graph the updates are captured with the step: the learning rate and SGD's
// constants must not change from step to step (AdamW's bias corrections do: no graph).
// The update stream runs at the least priority, below the compute streams (Note [Stream
// priorities] in framework/cuda/stream.h): an update's blocks take only SMs no backward block
// waits for. Measured on 2 H200s (docs/performance.md) it does not pay over NVLink in bf16, at
// either priority (likely, not traced: the updates cost backward memory bandwidth about as much
// as they save): off by default. Sharded (--shard-update) it does.
struct UpdateInBackward::Streams {
#if VITDDP_WITH_CUDA
  cuda::Stream update;
  cuda::Event done;
#endif
};

UpdateInBackward::UpdateInBackward(Reducer& reducer, Optimizer& optimizer, const Device& device,
                                   ShardedUpdate* sharded)
    : reducer_(reducer), optimizer_(optimizer), sharded_(sharded) {
  if (device.is_cuda()) {
#if VITDDP_WITH_CUDA
    streams_ = std::make_unique<Streams>();
    // Below the compute streams (Note [Stream priorities]): the updates take the SMs backward
    // leaves idle instead of delaying its kernels.
    streams_->update = cuda::Stream::create(device.index, cuda::background_priority());
    streams_->done = cuda::Event::create();
#else
    throw Error("updates in backward on a GPU need a CUDA build");
#endif
  }
  reducer_.set_launch_listener([this](size_t bucket) { launched(bucket); });
}

UpdateInBackward::~UpdateInBackward() { reducer_.set_launch_listener(nullptr); }

void UpdateInBackward::begin_step() {
  VITDDP_CHECK(!stepping_, "UpdateInBackward: begin_step() twice without after_backward()");
  optimizer_.begin_step();
  stepping_ = true;
  in_backward_ = !reducer_.rebuild_pending();
  if (sharded_) sharded_->begin_step(/*scatter=*/in_backward_);  // a rebuild needs every weight updated
  lagging_.reset();
}

void UpdateInBackward::launched(size_t bucket) {
  if (!stepping_ || !in_backward_) return;
  if (lagging_) {
    apply(*lagging_);
    ++(finishing_ ? issued_after_backward_ : issued_in_backward_);
  }
  lagging_ = bucket;
}

void UpdateInBackward::apply(size_t bucket) {
  NvtxRange range(nvtx_update_name(static_cast<int>(bucket)), NvtxColor::kOptimizer);
#if VITDDP_WITH_CUDA
  std::optional<cuda::StreamGuard> on_update;
  if (streams_) on_update.emplace(streams_->update.get());
#endif
  reducer_.wait_bucket(bucket);  // on the GPU the update stream waits, not the host
  if (sharded_) {
    sharded_->update(bucket);
    return;
  }
  for (const auto& [begin, end] : reducer_.flat_ranges(bucket)) optimizer_.update(begin, end);
}

void UpdateInBackward::replayed() {
  VITDDP_CHECK(stepping_ && in_backward_ && !lagging_, "UpdateInBackward: replayed() for a step that did not begin "
               "with begin_step() or that did not update in backward");
  stepping_ = false;
}

void UpdateInBackward::after_backward() {
  VITDDP_CHECK(stepping_, "UpdateInBackward: after_backward() without begin_step()");
  if (!in_backward_) {  // this step may rebuild the buckets: the plain order
    stepping_ = false;
    reducer_.finalize();
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
  if (lagging_) {
    apply(*lagging_);
    ++issued_after_backward_;
  }
  lagging_.reset();
  if (sharded_) {
#if VITDDP_WITH_CUDA
    std::optional<cuda::StreamGuard> on_update;
    if (streams_) on_update.emplace(streams_->update.get());
#endif
    sharded_->finish_step();  // the update stream waits for the gathers and the report's consensus
  }
#if VITDDP_WITH_CUDA
  if (streams_) {
    streams_->done.record(streams_->update.get());
    streams_->done.block(cuda::current_stream());
  }
#endif
}

}  // namespace vitddp
