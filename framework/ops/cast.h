// Differentiable dtype conversion: the gradient is converted back to the input's dtype.
#pragma once

#include "framework/core/tensor.h"

namespace vitddp {

// Returns x itself when it already has `dtype`.
Tensor cast(const Tensor& x, DType dtype);

}  // namespace vitddp
