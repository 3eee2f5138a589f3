// Fused optimizer updates over flat buffers: one launch per step for every parameter. The
// master weights are f32; gradients are f32 or 16-bit; with mixed precision the same pass
// writes the 16-bit copy of the updated weights that the forward reads (`params16`).
#pragma once

#include <cstdint>

#include "framework/core/dtype.h"

namespace vitddp::cuda {

struct FlatBuffers {
  float* master = nullptr;     // (n) f32 weights, updated in place
  const void* grads = nullptr; // (n) in grad_dtype
  DType grad_dtype = DType::kF32;
  void* params16 = nullptr;    // (n) in params16_dtype, or null without mixed precision
  DType params16_dtype = DType::kBF16;
  int64_t n = 0;
  // Device flag (optim/nonfinite.h): when it holds anything but INT64_MAX the update is skipped.
  const int64_t* skip_if_set = nullptr;
  // Device flag to report into instead (Note [The non-finite scan in the update] in
  // framework/optim/optimizer.h): the update runs whatever the gradients hold, and the flag
  // ends as the smallest index of a non-finite gradient element, or INT64_MAX.
  int64_t* report_nonfinite = nullptr;
  // Arena index of element 0 of these buffers (a range of the arena: Note [An update in ranges]
  // in framework/optim/optimizer.h); reported indices are arena indices.
  int64_t index_base = 0;
};

// Clears a report flag (to INT64_MAX) before the updates of a step report into it.
void reset_nonfinite_report(int64_t* report);

// PyTorch SGD: d = g + wd p; with a momentum buffer (may be null) buf = mu buf + d, d = buf;
// p -= lr d.
void sgd_step(const FlatBuffers& buffers, float* momentum, float lr, float mu, float wd);
// PyTorch AdamW with bias corrections folded into step_size and inv_sqrt_bc2.
void adamw_step(const FlatBuffers& buffers, float* exp_avg, float* exp_avg_sq, float decay, float beta1, float beta2,
                float eps, float step_size, float inv_sqrt_bc2);

}  // namespace vitddp::cuda
