// OverlappedUpdate: each DDP bucket's optimizer update waits for the next forward's first use
// of its parameters, so the all-reduce of a step may run on beside the next step's forward.
// See Note [Updates in the next forward] in overlapped_update.cpp.
//
//   after_backward()  after a synchronised backward, instead of reducer.finalize() and
//                     optimizer.step(): the buckets stay in flight, their updates pending (but
//                     for those launched in ready order when others follow them, applied now)
//   (forward)         the model's forward pre-hook applies a bucket's update (waiting for its
//                     communication) when a module about to run owns one of its parameters
//   flush()           every pending update, before backward, before reading or saving weights
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "distributed/reducer.h"
#include "framework/nn/module.h"
#include "framework/nn/param_arena.h"
#include "framework/optim/optimizer.h"

namespace vitddp {

class OverlappedUpdate {
 public:
  // The reducer's parameter i must be the arena's parameter i. Installs the pre-hook on
  // `model` (every module), whose parameters are the arena's; the destructor removes it.
  OverlappedUpdate(Reducer& reducer, Optimizer& optimizer, const ParamArena& arena, Module& model);
  ~OverlappedUpdate();
  OverlappedUpdate(const OverlappedUpdate&) = delete;
  OverlappedUpdate& operator=(const OverlappedUpdate&) = delete;

  void after_backward();
  void flush();
  // Buckets whose update has not been applied yet.
  size_t pending() const { return pending_count_; }

 private:
  void before_forward(const Module& module);
  const std::vector<size_t>& params_of(const Module& module);
  void apply(size_t bucket);

  Reducer& reducer_;
  Optimizer& optimizer_;
  Module& model_;
  std::unordered_map<const void*, size_t> param_at_;                 // data pointer -> arena index
  std::unordered_map<const Module*, std::vector<size_t>> own_params_;  // a module's own, as arena indices
  std::vector<bool> pending_;                                          // per bucket
  size_t pending_count_ = 0;
};

}  // namespace vitddp
