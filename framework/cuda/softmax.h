// CUDA softmax over the last dim (one warp per row), contiguous f32/bf16/f16, current stream.
#pragma once

#include <cstdint>

#include "framework/core/tensor.h"

namespace vitddp::cuda {

void softmax_forward(const Tensor& x, const Tensor& y);
void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx);
// Raw row kernels for other ops (attention): in may alias out; dx = scale * y * (dy - <dy, y>).
void softmax_rows(const void* in, void* out, DType dtype, int64_t rows, int64_t cols);
void softmax_rows_backward(const void* y, const void* dy, void* dx, DType dtype, int64_t rows, int64_t cols,
                           float scale = 1.0f);

}  // namespace vitddp::cuda
