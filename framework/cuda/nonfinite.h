// The index of the first non-finite element of a flat gradient buffer, on the device.
#pragma once

#include "framework/core/tensor.h"

namespace vitddp::cuda {

// flag (1) i64 := smallest index i with grads[i] NaN or Inf, else INT64_MAX. Two launches.
void first_nonfinite(const Tensor& grads, const Tensor& flag);

}  // namespace vitddp::cuda
