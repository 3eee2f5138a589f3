// Elementwise CUDA kernels that autograd itself needs.
#pragma once

#include "framework/core/tensor.h"

namespace vitddp::cuda {

// dst += alpha * src; same shape, dtype and device; any layout.
void add_inplace(const Tensor& dst, const Tensor& src, double alpha);

}  // namespace vitddp::cuda
