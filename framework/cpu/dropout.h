// CPU dropout mask, f32 and f64.
#pragma once

#include "framework/core/random.h"
#include "framework/core/tensor.h"

namespace vitddp::cpu {

// Fills the contiguous `mask` with 0 (probability p) or 1/(1-p), one gen.uniform() per element
// in row-major order, so a given (seed, counter) always gives the same mask.
void dropout_mask(const Tensor& mask, double p, Generator& gen);

}  // namespace vitddp::cpu
