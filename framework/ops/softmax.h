// Softmax over the last dimension (max-subtracted for stability).
#pragma once

#include "framework/core/tensor.h"

namespace vitddp {

Tensor softmax(const Tensor& x);

}  // namespace vitddp
