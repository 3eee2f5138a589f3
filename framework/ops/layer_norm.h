// Layer normalisation over the last dimension, as torch.nn.LayerNorm(normalized_shape=D).
#pragma once

#include "framework/core/tensor.h"

namespace vitddp {

// x (..., D), weight (D), bias (D) -> (..., D): (x - mean) / sqrt(var + eps) * weight + bias,
// with the biased variance.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);

// A residual stream's add and the layer norm that reads it: sum = a + b, normed =
// layer_norm(sum), with add's and layer_norm's results and autograd graph. On the GPU, where a and
// b have one shape, one kernel writes both (the sum is not read back); otherwise add, then
// layer_norm.
struct AddLayerNorm {
  Tensor sum;
  Tensor normed;
};
AddLayerNorm add_layer_norm(const Tensor& a, const Tensor& b, const Tensor& weight, const Tensor& bias, double eps);

}  // namespace vitddp
