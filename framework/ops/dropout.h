// Inverted dropout: in training, zeroes each element with probability p and scales the rest by
// 1/(1-p); identity when !training or p == 0. The mask is drawn from `gen`.
#pragma once

#include "framework/core/random.h"
#include "framework/core/tensor.h"

namespace vitddp {

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);

}  // namespace vitddp
