// CUDA GELU kernels (exact erf form) on contiguous f32/bf16/f16 tensors, current stream.
#pragma once

#include "framework/core/tensor.h"

namespace vitddp::cuda {

void gelu_forward(const Tensor& x, const Tensor& y);
void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);

}  // namespace vitddp::cuda
