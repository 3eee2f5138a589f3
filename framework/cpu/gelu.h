// CPU GELU kernels (exact erf form), f32 and f64, on contiguous tensors.
#pragma once

#include "framework/core/tensor.h"

namespace vitddp::cpu {

void gelu_forward(const Tensor& x, const Tensor& y);                       // y = gelu(x)
void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);   // dx = dy * gelu'(x)

}  // namespace vitddp::cpu
