// CUDA dropout mask: element i is 0 with probability p, else 1/(1-p), from draw
// mix64(seed, counter + i): the same mask the CPU kernel draws from Generator(seed, counter).
#pragma once

#include <cstdint>

#include "framework/core/tensor.h"

namespace vitddp::cuda {

void dropout_mask(const Tensor& mask, double p, uint64_t seed, uint64_t counter);

}  // namespace vitddp::cuda
