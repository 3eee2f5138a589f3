// GradNormClip: global gradient-norm clipping, as torch.nn.utils.clip_grad_norm_(params,
// max_norm) after DDP's all-reduce: norm = the 2-norm of every gradient element of the arena,
// scale = min(1, max_norm / (norm + 1e-6)), and the optimizer's update multiplies each gradient
// by the scale as it reads it (Optimizer::set_grad_clip): no pass of its own over the gradients.
// The scale stays on the device, so the host never waits and a captured step clips too.
//
// The norm is a sum over ranges: add_squares() of every range of the arena (or, with sharded
// updates, of this rank's parts, the per-rank sums then all-reduced: Note [Sharded updates]),
// then finish(). Deterministic: a fixed order of partial sums.
#pragma once

#include <cstdint>

#include "framework/nn/param_arena.h"

namespace vitddp {

class GradNormClip {
 public:
  GradNormClip(const ParamArena& arena, double max_norm);
  double max_norm() const { return max_norm_; }
  // Starts a step's norm: the sum of squares is zeroed (in stream order on a GPU).
  void begin();
  // Adds the squares of gradient elements [begin, end) of the arena.
  void add_squares(int64_t begin, int64_t end);
  // The sum of squares so far, (1) f64 on the arena's device: what ranks all-reduce when each
  // summed its own part.
  Tensor sum_of_squares() const { return squares_; }
  // Turns the sum into the norm and the scale.
  void finish();
  // Every range at once: begin(), add_squares(0, numel), finish().
  void measure_all();
  Tensor scale() const { return scale_; }  // (1) f32: what every gradient is multiplied by
  Tensor norm() const { return norm_; }    // (1) f32: the norm before clipping

 private:
  const ParamArena& arena_;
  double max_norm_;
  Tensor squares_;  // (1) f64
  Tensor scratch_;  // GPU: partial sums
  Tensor norm_, scale_;
};

}  // namespace vitddp
