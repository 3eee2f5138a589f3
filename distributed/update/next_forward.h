// NextForwardUpdate (update next-forward): each DDP bucket's optimizer update waits for the next
// forward's first use of its parameters, so a step's all-reduce runs on beside the next step's
// forward. See Note [Updates in the next forward] in the .cpp.
//
//   after_backward()   the buckets stay in flight, their updates pending (but for those launched in
//                      ready order when others follow them, applied now)
//   (forward)          the model's forward pre-hook applies a bucket's update (waiting for its
//                      communication) when a module about to run owns one of its parameters
//   before_backward()  the updates the forward did not reach (unused parameters), before backward
//                      rewrites their gradients; the last step's report is then complete
//   flush()            every pending update, before reading or saving weights
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "distributed/reducer.h"
#include "distributed/update/update_schedule.h"
#include "framework/nn/module.h"
#include "framework/nn/param_arena.h"
#include "framework/optim/optimizer.h"

namespace vitddp {

class NextForwardUpdate final : public UpdateSchedule {
 public:
  // The reducer's parameter i must be the arena's parameter i. Installs the pre-hook on `model`
  // (every module), whose parameters are the arena's; the destructor removes it. `report`: the
  // optimizer's non-finite report (undefined: none), copied once a step's updates have all run.
  NextForwardUpdate(Reducer& reducer, Optimizer& optimizer, const ParamArena& arena, Module& model, Tensor report);
  ~NextForwardUpdate() override;
  NextForwardUpdate(const NextForwardUpdate&) = delete;
  NextForwardUpdate& operator=(const NextForwardUpdate&) = delete;

  void before_backward(int64_t micro) override;
  void after_backward(bool sync) override;
  void flush() override;
  int report_lag() const override { return 1; }
  Tensor step_report(const Tensor& report) const override { return done_report_.defined() ? done_report_ : report; }
  // Buckets whose update has not been applied yet.
  size_t pending() const { return pending_count_; }

 private:
  void before_forward(const Module& module);
  const std::vector<size_t>& params_of(const Module& module);
  void apply(size_t bucket);

  Reducer& reducer_;
  Optimizer& optimizer_;
  Module& model_;
  Tensor report_;       // the optimizer's, written by the updates
  Tensor done_report_;  // its copy, made when the last step's updates had all run
  std::unordered_map<const void*, size_t> param_at_;                 // data pointer -> arena index
  std::unordered_map<const Module*, std::vector<size_t>> own_params_;  // a module's own, as arena indices
  std::vector<bool> pending_;                                          // per bucket
  size_t pending_count_ = 0;
};

}  // namespace vitddp
