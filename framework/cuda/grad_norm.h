// The global gradient norm for clipping (framework/optim/grad_clip.h), deterministic: a fixed
// grid of partial sums, added in a fixed order.
#pragma once

#include <cstdint>

#include "framework/core/dtype.h"

namespace vitddp::cuda {

// Blocks of the partial sums; `scratch` of add_sum_of_squares holds this many doubles.
constexpr int kGradNormBlocks = 264;

// acc[0] (f64) += the sum of squares of x[0, n) (f32, bf16 or f16), in stream order.
void add_sum_of_squares(const void* x, DType dtype, int64_t n, double* acc, double* scratch);
// acc[0] = 0.
void zero_sum_of_squares(double* acc);
// norm[0] = sqrt(acc[0]); scale[0] = min(1, max_norm / (norm + 1e-6)), as torch's clip_grad_norm_.
void clip_scale_from_squares(const double* acc, double max_norm, float* norm, float* scale);

}  // namespace vitddp::cuda
