// Differentiable reductions.
#pragma once

#include "framework/core/tensor.h"

namespace vitddp {

Tensor sum(const Tensor& x);   // all elements -> shape [] (one element)
Tensor mean(const Tensor& x);  // all elements -> shape []; throws on an empty tensor
// Sums `x` over broadcast dimensions so the result has `shape` (the inverse of broadcasting):
// leading extra dims are summed away, dims where shape has 1 are summed with keepdim.
// Returns `x` itself when shapes already match. Accumulates in f64 on the CPU.
Tensor sum_to_shape(const Tensor& x, const Shape& shape);

}  // namespace vitddp
