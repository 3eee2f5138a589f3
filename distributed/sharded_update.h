// ShardedUpdate (--shard-update): ZeRO stage 1 over DDP's buckets. Each rank updates only its
// part of every bucket and the ranks all-gather the updated weights, instead of each rank
// updating every weight from all-reduced gradients. See Note [Sharded updates] in
// sharded_update.cpp. It is driven by UpdateInBackward, which places each bucket's update:
//
//   begin_step(scatter)  the hook reduce-scatters this step's buckets, or all-reduces them (a
//                        step that may rebuild the buckets updates every weight, as plainly)
//   update(b)            on the current stream: bucket b's own part updated, its weights gathered
//   finish_step()        on the current stream, after the last update(): the ranks agree on the
//                        non-finite report, and the stream waits for every gather
//   gather_state()       before weights or optimizer state are read whole (a checkpoint, --save)
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "distributed/hooks/reduce_scatter.h"
#include "distributed/process_group.h"
#include "distributed/reducer.h"
#include "framework/nn/param_arena.h"
#include "framework/optim/optimizer.h"

namespace vitddp {

class ShardedUpdate {
 public:
  // The reducer's hook must be a ReduceScatterHook, its buckets views of `arena`'s gradients
  // (one range each), its group `group`. `nonfinite_report`: the optimizer's report flag (an
  // int64 scalar on the arena's device), or undefined for none.
  ShardedUpdate(Reducer& reducer, ProcessGroup& group, Optimizer& optimizer, const ParamArena& arena,
                Tensor nonfinite_report);
  ShardedUpdate(const ShardedUpdate&) = delete;
  ShardedUpdate& operator=(const ShardedUpdate&) = delete;

  void begin_step(bool scatter);
  bool scatters() const { return hook_.scatters(); }
  void update(size_t bucket);
  void finish_step();
  void gather_state();
  // Bucket updates so far that updated only this rank's part.
  size_t sharded_updates() const { return sharded_updates_; }

 private:
  // The bucket's element range [begin, end) in the arena.
  std::pair<int64_t, int64_t> range_of(size_t bucket) const;
  // All-gathers the bucket's parts of `flat` (an arena-sized flat tensor) in place.
  std::shared_ptr<Work> gather(const Tensor& flat, size_t bucket);

  Reducer& reducer_;
  ProcessGroup& group_;
  Optimizer& optimizer_;
  const ParamArena& arena_;
  Tensor report_;
  ReduceScatterHook& hook_;
  std::vector<std::shared_ptr<Work>> gathers_;  // this step's, waited for by finish_step()
  size_t sharded_updates_ = 0;
};

}  // namespace vitddp
