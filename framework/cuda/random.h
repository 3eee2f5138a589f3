// Random fills on the GPU with the CPU Generator's draws: element i of a normal fill uses
// draws (counter + 2i, counter + 2i + 1) of mix64(seed, .), exactly as fill_normal on the CPU.
#pragma once

#include <cstdint>

#include "framework/core/tensor.h"

namespace vitddp::cuda {

// t contiguous f32/bf16/f16: N(mean, std).
void fill_normal(const Tensor& t, uint64_t seed, uint64_t counter, double mean, double std);
// t contiguous i64: uniform integers in [0, high), draw i = counter + i.
void fill_randint(const Tensor& t, uint64_t seed, uint64_t counter, int64_t high);

}  // namespace vitddp::cuda
