// ShardedUpdate (update sharded): ZeRO stage 1 over DDP's buckets. Each bucket is
// reduce-scattered; right after that, on an update stream of its own beside the rest of backward,
// each rank updates only its part of the bucket and the ranks all-gather the updated weights. See
// Note [Sharded updates] in the .cpp.
//
//   begin_step()       before the synchronised micro-batch, outside any CUDA graph capture: the
//                      optimizer's begin_step; the hook reduce-scatters this step's buckets, or
//                      all-reduces them in the step that may rebuild them (its update is plain)
//   (backward)         each bucket launch enqueues the update of the bucket launched before it
//                      (with a gradient clip, every update waits for the norm after backward)
//   after_backward()   the last bucket's update, the ranks' agreement on the non-finite report,
//                      then the current stream waits for the update stream
//   replayed()         instead of the backward, for a step replayed as a CUDA graph
//   gather_state()     every rank's master weights and optimizer state made whole (a checkpoint,
//                      the final --save)
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "distributed/hooks/reduce_scatter.h"
#include "distributed/process_group.h"
#include "distributed/reducer.h"
#include "distributed/update/update_schedule.h"
#include "framework/nn/param_arena.h"
#include "framework/optim/optimizer.h"

namespace vitddp {

class ShardedUpdate final : public UpdateSchedule {
 public:
  // The reducer's hook must be a ReduceScatterHook, its buckets views of `arena`'s gradients (one
  // range each), its group `group`. `report`: the optimizer's non-finite report flag (an int64
  // scalar on the arena's device), or undefined for none. Follows the reducer's launches (its
  // launch listener) until destroyed.
  ShardedUpdate(Reducer& reducer, ProcessGroup& group, Optimizer& optimizer, const ParamArena& arena, Tensor report);
  ~ShardedUpdate() override;
  ShardedUpdate(const ShardedUpdate&) = delete;
  ShardedUpdate& operator=(const ShardedUpdate&) = delete;

  void begin_step() override;
  void after_backward(bool sync) override;
  void replayed() override;
  void gather_state() override;
  std::string summary() const override;

  // Whether the step begun last reduce-scatters (and updates beside backward).
  bool scatters() const { return hook_.scatters(); }
  // Bucket updates that updated only this rank's part, so far.
  size_t sharded_updates() const { return sharded_updates_; }
  // Bucket updates issued while backward was still being issued (at the next bucket's launch),
  // and after it (each step's last bucket, and every bucket of a step updated plainly); a
  // replayed step issues none.
  size_t issued_in_backward() const { return issued_in_backward_; }
  size_t issued_after_backward() const { return issued_after_backward_; }

 private:
  void launched(size_t bucket);
  void update(size_t bucket);  // on the update stream: wait for the bucket, update its part, gather
  // With a clip, after every bucket is reduced: the norm over all ranks' parts, then every
  // bucket's update (Note [Clipping sharded updates]).
  void clip_and_update_all();
  void finish_step();          // on the update stream: the report's consensus, the gathers waited for
  // The bucket's element range [begin, end) in the arena.
  std::pair<int64_t, int64_t> range_of(size_t bucket) const;
  // All-gathers the bucket's parts of `flat` (an arena-sized flat tensor) in place.
  std::shared_ptr<Work> gather(const Tensor& flat, size_t bucket);

  struct Streams;  // GPU: the update stream and the event the current stream joins it by
  Reducer& reducer_;
  ProcessGroup& group_;
  Optimizer& optimizer_;
  const ParamArena& arena_;
  Tensor report_;
  ReduceScatterHook& hook_;
  std::unique_ptr<Streams> streams_;
  bool stepping_ = false;          // between begin_step() and after_backward()
  bool finishing_ = false;         // inside after_backward(): launches of unused parameters' buckets
  std::optional<size_t> lagging_;  // the last bucket launched, its update not enqueued yet
  std::vector<std::shared_ptr<Work>> gathers_;  // this step's, waited for by finish_step()
  size_t sharded_updates_ = 0;
  size_t issued_in_backward_ = 0;
  size_t issued_after_backward_ = 0;
};

}  // namespace vitddp
