// CPU reduction kernels, f32 and f64, accumulating in f64. Inputs may have any layout.
#pragma once

#include "framework/core/tensor.h"

namespace vitddp::cpu {

// out (one element) = factor * sum of all elements of x.
void sum_all(const Tensor& x, double factor, const Tensor& out);
// out (contiguous; its shape broadcasts to x's) = x summed over the broadcast dims.
void sum_to_shape(const Tensor& x, const Tensor& out);

}  // namespace vitddp::cpu
