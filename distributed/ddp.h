// DistributedDataParallel: what a trainer talks to for data parallelism, as PyTorch's
// DistributedDataParallel wraps a model. It owns the process group, the bucket plan and the
// reducer, the communication hook, and where the optimizer update runs (UpdatePlacement,
// distributed/update/update_schedule.h). Made from a model's parameter arena: the constructor is
// the one place where parameters meet the reducer (their gradient-ready hooks). One step:
//
//   begin_step()              before the synchronised micro-batch, outside any CUDA graph capture
//   (forward)                 next-forward updates apply a module's pending buckets before it runs
//   begin_backward(micro, sync)  before each micro-batch's backward
//   (backward)                each parameter's gradient-ready hook feeds the reducer
//   end_backward(sync)        after it: the buckets finished, or left to the update placement
//   step()                    the update, where it runs after backward (updates_in_step())
//   flush()                   every pending update applied, before weights are read
//   gather_state()            every rank's state whole (a collective), before it is saved
//   replayed()                instead of the backward, for a step replayed as a CUDA graph
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "distributed/comm_hook.h"
#include "distributed/hooks/powersgd.h"
#include "distributed/process_group.h"
#include "distributed/reducer.h"
#include "distributed/update/update_schedule.h"
#include "framework/nn/module.h"
#include "framework/nn/param_arena.h"
#include "framework/optim/optimizer.h"

namespace vitddp {

enum class HookKind { kAllReduce, kFp16, kBf16, kPowerSgd };

// "allreduce", "fp16", "bf16", "powersgd" (--hook); throws on another name.
HookKind parse_hook_kind(const std::string& name);

struct DdpOptions {
  ProcessGroupOptions group;  // rank, world size, rendezvous, timeout, the host-copy transport
  ReducerOptions buckets;     // bucket caps, gradients as bucket views, unused parameters
  HookKind hook = HookKind::kAllReduce;
  PowerSgdOptions powersgd;   // for HookKind::kPowerSgd
  UpdatePlacement update = UpdatePlacement::kAfterBackward;
};

class DistributedDataParallel {
 public:
  // Makes the process group (NCCL on a GPU arena, else Gloo), checks that every rank built the
  // same parameters, gives every rank rank 0's weights, and wires every parameter of `arena` to
  // the reducer. `model` owns the arena's parameters (next-forward updates hook its forward);
  // `report`: the optimizer's non-finite report flag, or undefined when the optimizer skips.
  DistributedDataParallel(ParamArena& arena, Module& model, Optimizer& optimizer, Tensor report,
                          const DdpOptions& options);
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  void begin_step() { schedule_->begin_step(); }
  void begin_backward(int64_t micro, bool sync);
  void end_backward(bool sync) { schedule_->after_backward(sync); }
  bool updates_in_step() const { return schedule_->updates_in_step(); }
  void step() { schedule_->step(); }
  void flush() { schedule_->flush(); }
  void gather_state() { schedule_->gather_state(); }
  void replayed();

  // How many steps after its own a step's non-finite report is complete (0, or 1 with next-forward
  // updates), and the report to record when a step ends.
  int report_lag() const { return schedule_->report_lag(); }
  Tensor step_report(const Tensor& report) const { return schedule_->step_report(report); }

  UpdatePlacement placement() const { return placement_; }
  ProcessGroup& group() { return *group_; }
  Reducer& reducer() { return *reducer_; }
  const Reducer& reducer() const { return *reducer_; }
  CommHook& hook() { return reducer_->hook(); }
  // The run's PowerSGD hook, whose state checkpoints carry; null with another hook.
  PowerSgdHook* powersgd();
  const UpdateSchedule& schedule() const { return *schedule_; }
  // "2 ranks (nccl), 13 buckets of <= 25 MB, hook allreduce, gradients as bucket views, ...":
  // what the start line says of the data-parallel set-up.
  std::string describe() const;

 private:
  UpdatePlacement placement_;
  DdpOptions options_;
  std::unique_ptr<ProcessGroup> group_;
  std::unique_ptr<Reducer> reducer_;
  std::unique_ptr<UpdateSchedule> schedule_;
};

}  // namespace vitddp
