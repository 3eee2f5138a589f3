// Data-level arithmetic that autograd itself needs (gradient accumulation), not recorded.
#pragma once

#include "framework/core/tensor.h"

namespace vitddp {

// dst += alpha * src, elementwise; same shape, dtype and device; any layout.
void add_inplace(const Tensor& dst, const Tensor& src, double alpha = 1.0);
// Returns a + b as a new contiguous tensor (same shape, dtype, device).
Tensor add_new(const Tensor& a, const Tensor& b);

}  // namespace vitddp
