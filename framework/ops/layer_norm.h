// Layer normalisation over the last dimension, as torch.nn.LayerNorm(normalized_shape=D).
#pragma once

#include "framework/core/tensor.h"

namespace vitddp {

// x (..., D), weight (D), bias (D) -> (..., D): (x - mean) / sqrt(var + eps) * weight + bias,
// with the biased variance.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);

}  // namespace vitddp
