// Differentiable elementwise arithmetic with numpy broadcasting. Backward reduces the gradient
// back to each input's shape (sum_to_shape).
#pragma once

#include "framework/core/tensor.h"

namespace vitddp {

Tensor add(const Tensor& a, const Tensor& b);   // a + b, broadcast
Tensor mul(const Tensor& a, const Tensor& b);   // a * b, broadcast
Tensor scale(const Tensor& a, double factor);   // a * factor

}  // namespace vitddp
