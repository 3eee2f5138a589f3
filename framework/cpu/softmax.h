// CPU softmax kernels over the last dim, f32 and f64, on contiguous tensors.
#pragma once

#include <cstdint>

#include "framework/core/tensor.h"

namespace vitddp::cpu {

// Row-wise softmax of x (rows, cols) into y, max-subtracted; `in` and `out` may alias.
template <typename T>
void softmax_rows(const T* in, T* out, int64_t rows, int64_t cols);
// dx = y * (dy - sum(dy * y)) row-wise, with y the softmax output.
template <typename T>
void softmax_rows_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols);

void softmax_forward(const Tensor& x, const Tensor& y);                      // last dim
void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx);  // last dim

}  // namespace vitddp::cpu
