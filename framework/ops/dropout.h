// Inverted dropout: in training, zeroes each element with probability p and scales the rest by
// 1/(1-p); identity (returns x, draws nothing) when !training or p == 0. p must be in [0, 1).
// The mask is drawn from `gen`: one gen.uniform() per element in row-major order, dropped iff < p.
#pragma once

#include "framework/core/random.h"
#include "framework/core/tensor.h"

namespace vitddp {

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);

}  // namespace vitddp
