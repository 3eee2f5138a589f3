// Communication hooks: what the reducer does with a full bucket. A hook is a small object with
// explicit state; the reducer never switches on the hook type.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "framework/core/tensor.h"

namespace vitddp {

// One bucket as a hook sees it: a flat 1-D buffer of gradients (a slice of the gradient arena
// when gradients are bucket views), and where each parameter's gradient lies inside it.
struct GradBucket {
  size_t index = 0;
  Tensor buffer;                  // (numel) contiguous, compute dtype
  std::vector<size_t> params;     // parameter indices, in bucket order
  std::vector<int64_t> offsets;   // element offset of each parameter's gradient in `buffer`
  std::vector<Shape> shapes;      // each parameter's shape
  bool is_last = false;
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::string name() const = 0;
  // Starts the bucket's communication; when the returned work is waited for, `bucket.buffer`
  // holds the average of every rank's gradients (or the hook's approximation of it).
  virtual std::shared_ptr<Work> run(ProcessGroup& group, GradBucket& bucket) = 0;
  // The reducer rebuilt its buckets (Note [Bucket rebuild] in reducer.cpp): state kept per
  // bucket index no longer matches.
  virtual void buckets_rebuilt() {}
  // Whether the next step's run() calls do what every later step's will: no set-up left (state
  // made, host copies, new product shapes tuned), so that the step may be captured as a CUDA
  // graph and replayed (Note [A step as a CUDA graph]). The same on every rank.
  virtual bool steady() const { return true; }
  // A captured step was replayed: host-side state that run() advances advances here.
  virtual void replayed() {}
  // What the hook did over the run, for its last lines ("" when there is nothing to say).
  virtual std::string summary() const { return ""; }
  // For a step whose all-reduced gradients were found not finite: if this hook made them so
  // (finite values its compression could not represent), why, in words; else "".
  // `step` counts the steps this hook has communicated, from 0. May read device memory (and
  // wait for it): for the error path only.
  virtual std::string explain_nonfinite(int64_t step) const {
    (void)step;
    return "";
  }
};

// Plain averaging all-reduce (ReduceOp::kAvg) in place on the bucket.
std::unique_ptr<CommHook> make_allreduce_hook();
// Divide by the world size, cast to fp16 or bf16, all-reduce, cast back into the bucket.
// Finite gradients that become Inf (beyond fp16's 65504 after the division, or in the sum) are
// noted on the device and named by explain_nonfinite(); the Inf goes on to NonfiniteCheck like
// any other non-finite value, so --nonfinite decides (Note [Compression overflow]).
std::unique_ptr<CommHook> make_cast_compress_hook(DType dtype);

}  // namespace vitddp
