// Communication hooks: what the reducer does with a full bucket. A hook is a small object with
// explicit state; the reducer never switches on the hook type (STYLE practice 8).
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
};

// Plain averaging all-reduce (ReduceOp::kAvg) in place on the bucket.
std::unique_ptr<CommHook> make_allreduce_hook();
// Divide by the world size, cast to fp16 or bf16, all-reduce, cast back into the bucket.
std::unique_ptr<CommHook> make_cast_compress_hook(DType dtype);

}  // namespace vitddp
