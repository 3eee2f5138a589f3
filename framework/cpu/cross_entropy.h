// CPU cross-entropy kernels, f32 and f64 logits, on contiguous tensors. `target`: labels (B) i64
// or soft targets (B, C) in the logits' dtype; `eps`: label smoothing (framework/ops/cross_entropy.h).
#pragma once

#include "framework/core/tensor.h"

namespace vitddp::cpu {

// loss (shape []) = mean over rows of sum_c t'_c (logsumexp(x_r) - x_rc), accumulated in
// double. Throws naming the first label outside [0, C) and its position.
void cross_entropy_forward(const Tensor& logits, const Tensor& target, double eps, const Tensor& loss);
// dlogits = (softmax(x_r) * sum_c t'_c - t'_r) * dloss / B, with dloss a one-element tensor.
void cross_entropy_backward(const Tensor& logits, const Tensor& target, double eps, const Tensor& dloss,
                            const Tensor& dlogits);

}  // namespace vitddp::cpu
