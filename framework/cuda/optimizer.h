// Fused optimizer updates over flat buffers: one launch per step for every parameter. The
// master weights are f32; gradients are f32 or 16-bit; with mixed precision the same pass
// writes the 16-bit copy of the updated weights that the forward reads (`params16`), and with a
// model EMA the same pass updates the average.
#pragma once

#include <cstdint>

#include "framework/core/dtype.h"
#include "framework/optim/step_constants.h"

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
  const StepConstants* constants = nullptr;  // device, this step's (framework/optim/step_constants.h)
  // Device f32 scalar every gradient is multiplied by (global norm clipping), or null.
  const float* grad_scale = nullptr;
  // One bit per 16-element chunk of the arena (chunk c: bit c % 64 of word c / 64), set where
  // weight decay applies; null: everywhere. Parameters start at 16-element boundaries.
  const int64_t* decay_mask = nullptr;
  float* ema = nullptr;  // (n) f32 model average beside the master weights, or null
};

// Writes a step's constants into device memory, in stream order.
void write_step_constants(StepConstants* device_constants, const StepConstants& values);

// Clears a report flag (to INT64_MAX) before the updates of a step report into it.
void reset_nonfinite_report(int64_t* report);

// PyTorch SGD: d = g + wd p; with a momentum buffer (may be null) buf = mu buf + d, d = buf;
// p -= lr d.
void sgd_step(const FlatBuffers& buffers, float* momentum, float mu, float wd);
// PyTorch AdamW with bias corrections folded into step_size and inv_sqrt_bc2.
void adamw_step(const FlatBuffers& buffers, float* exp_avg, float* exp_avg_sq, float beta1, float beta2, float eps);

}  // namespace vitddp::cuda
