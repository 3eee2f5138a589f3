// CUDA reductions (f32/bf16/f16, accumulating in f32 per thread and f64 across blocks where it
// matters), deterministic: no atomics, fixed reduction order.
#pragma once

#include "framework/core/tensor.h"

namespace vitddp::cuda {

// out (one element) = factor * sum of all elements of x (any layout).
void sum_all(const Tensor& x, double factor, const Tensor& out);
// out (contiguous; its shape broadcasts to x's) = x summed over the broadcast dims.
void sum_to_shape(const Tensor& x, const Tensor& out);
// out (N) = sum over rows of x (M, N) contiguous; accumulate=true adds into out.
void sum_rows(const void* x, DType dtype, int64_t rows, int64_t cols, void* out, bool accumulate = false);

}  // namespace vitddp::cuda
