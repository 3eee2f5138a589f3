// Differentiable elementwise arithmetic with numpy broadcasting. Backward reduces the gradient
// back to each input's shape (sum_to_shape).
#pragma once

#include "framework/core/tensor.h"

namespace vitddp {

Tensor add(const Tensor& a, const Tensor& b);   // a + b, broadcast
Tensor mul(const Tensor& a, const Tensor& b);   // a * b, broadcast
Tensor scale(const Tensor& a, double factor);   // a * factor

// Records `sum`, which a fused kernel computed as a + b (same shapes), as add's output in the
// autograd graph (add's backward), and returns it.
Tensor recorded_as_add(const Tensor& a, const Tensor& b, Tensor sum);

}  // namespace vitddp
