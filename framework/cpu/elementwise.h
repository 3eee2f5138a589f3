// CPU elementwise arithmetic kernels, f32 and f64. Inputs may have any layout; outputs are
// contiguous tensors allocated by the caller.
#pragma once

#include "framework/core/tensor.h"

namespace vitddp::cpu {

enum class BinaryOp { kAdd, kMul };

// out = a (op) b, where a and b broadcast (numpy rules) to out's shape. Same dtype throughout.
void binary_forward(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
// out = x * factor; same shape and dtype.
void scale_forward(const Tensor& x, double factor, const Tensor& out);

}  // namespace vitddp::cpu
