// Matrix products (Eigen on the CPU).
#pragma once

#include "framework/core/tensor.h"

namespace vitddp {

// x (..., in) @ weight(out, in)^T + bias(out) -> (..., out). bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
// a (..., M, K) @ b (..., K, N) -> (..., M, N); batch dims must be equal, or b is 2-D (K, N).
Tensor matmul(const Tensor& a, const Tensor& b);

}  // namespace vitddp
