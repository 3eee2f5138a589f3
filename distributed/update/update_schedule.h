// Where DDP's optimizer update runs (UpdatePlacement), one implementation each; the DDP object
// (distributed/ddp.h) drives the one its run chose, and the trainer never asks which it is.
//
//   after-backward  the plain order: every bucket finished, then one optimizer pass (here)
//   next-forward    each bucket's update when the next forward first uses it (next_forward.h)
//   sharded         each rank updates its part of each bucket beside backward and the weights
//                   are all-gathered: ZeRO stage 1 (sharded.h)
//
// Every placement gives the weights of the plain one, bit for bit (two ranks; with more NCCL may
// add in another order), and needs --nonfinite stop but the plain one.
#pragma once

#include <cstdint>
#include <string>

#include "distributed/reducer.h"
#include "framework/optim/optimizer.h"

namespace vitddp {

enum class UpdatePlacement { kAfterBackward, kNextForward, kSharded };

// "after-backward", "next-forward", "sharded" (the expert key update); throws on another name.
UpdatePlacement parse_update_placement(const std::string& name);
const char* update_placement_name(UpdatePlacement placement);

class UpdateSchedule {
 public:
  virtual ~UpdateSchedule() = default;
  // Before the step's synchronised micro-batch, on the host, outside any CUDA graph capture.
  virtual void begin_step() {}
  // Before micro-batch `micro`'s backward (inside a captured step).
  virtual void before_backward(int64_t micro) { (void)micro; }
  // After a micro-batch's backward, instead of the reducer's finalize(); `sync`: its gradients
  // were reduced.
  virtual void after_backward(bool sync) = 0;
  // Whether the step's update runs in step() (after backward), rather than beside it.
  virtual bool updates_in_step() const { return false; }
  virtual void step() {}
  // Every pending update applied: before weights are read, or gradients written.
  virtual void flush() {}
  // Every rank's master weights and optimizer state whole (a collective): before they are saved.
  virtual void gather_state() {}
  // The step ran as a replayed CUDA graph (no host backward): host state the step advances.
  virtual void replayed() {}
  // How many steps after its own a step's non-finite report is complete, and the report to
  // record when a step ends (the optimizer's, or a copy made once the last step's updates ran).
  virtual int report_lag() const { return 0; }
  virtual Tensor step_report(const Tensor& report) const { return report; }
  // What the run did, for its last lines ("" when there is nothing to say).
  virtual std::string summary() const { return ""; }
};

// The plain order: finalize() waits for every bucket; step() is the optimizer's step.
class UpdateAfterBackward final : public UpdateSchedule {
 public:
  UpdateAfterBackward(Reducer& reducer, Optimizer& optimizer) : reducer_(reducer), optimizer_(optimizer) {}
  void after_backward(bool) override { reducer_.finalize(); }
  bool updates_in_step() const override { return true; }
  void step() override { optimizer_.step(); }

 private:
  Reducer& reducer_;
  Optimizer& optimizer_;
};

}  // namespace vitddp
