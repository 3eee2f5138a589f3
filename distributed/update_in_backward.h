// UpdateInBackward: each DDP bucket's optimizer update runs as soon as that bucket's
// communication is done, on a stream of its own beside the rest of backward, instead of in one
// pass after backward. See Note [Updates in backward] in update_in_backward.cpp.
//
//   begin_step()      before the synchronised micro-batch: the optimizer's begin_step() on the
//                     current stream, outside any CUDA graph capture
//   (backward)        each bucket launch enqueues the update of the bucket launched before it
//   after_backward()  instead of reducer.finalize() and optimizer.step(): the last bucket's
//                     update, then the current stream waits for the updates
//   replayed()        instead of the backward and after_backward(), for a step replayed as a
//                     CUDA graph
// With a ShardedUpdate (--shard-update) each bucket's update is that rank's part of it, and the
// updated weights are all-gathered (Note [Sharded updates] in sharded_update.cpp).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>

#include "distributed/reducer.h"
#include "distributed/sharded_update.h"
#include "framework/core/dtype.h"
#include "framework/optim/optimizer.h"

namespace vitddp {

class UpdateInBackward {
 public:
  // Follows `reducer`'s launches (its launch listener) until destroyed. The reducer's flat
  // gradient buffer must be the optimizer's arena's.
  // `sharded` (not owned; may be null): its updates instead of whole buckets'.
  UpdateInBackward(Reducer& reducer, Optimizer& optimizer, const Device& device, ShardedUpdate* sharded = nullptr);
  ~UpdateInBackward();
  UpdateInBackward(const UpdateInBackward&) = delete;
  UpdateInBackward& operator=(const UpdateInBackward&) = delete;

  void begin_step();
  void after_backward();
  // Instead of the backward: the step ran as a replayed CUDA graph holding its updates (captured
  // from an earlier step's after_backward()), so the host only closes the step it began.
  void replayed();
  // Whether the step begun last updates its buckets in backward (not the step whose finalize
  // may rebuild the buckets: it updates after backward, as the plain step does).
  bool in_backward() const { return in_backward_; }
  // Bucket updates issued so far while backward was still being issued (at the next bucket's
  // launch), and after it (the last bucket of each step, and every bucket of a step updated
  // after backward); a replayed step issues none.
  size_t issued_in_backward() const { return issued_in_backward_; }
  size_t issued_after_backward() const { return issued_after_backward_; }

 private:
  void launched(size_t bucket);
  void apply(size_t bucket);

  struct Streams;  // GPU: the update stream and the event the current stream joins it by
  Reducer& reducer_;
  Optimizer& optimizer_;
  ShardedUpdate* sharded_;
  std::unique_ptr<Streams> streams_;
  bool stepping_ = false;          // between begin_step() and after_backward()
  bool finishing_ = false;         // inside after_backward(): launches of unused parameters' buckets
  bool in_backward_ = false;
  std::optional<size_t> lagging_;  // the last bucket launched, its update not enqueued yet
  size_t issued_in_backward_ = 0;
  size_t issued_after_backward_ = 0;
};

}  // namespace vitddp
