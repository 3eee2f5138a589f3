// CUDA cross-entropy: logits (B, C) f32/bf16/f16, target labels (B) i64 or soft targets (B, C) in
// the logits' dtype, label smoothing eps; loss (one element) = mean over rows, deterministic. A
// label outside [0, C) makes the loss NaN (kernels cannot throw; the trainer stops on a
// non-finite loss, and datasets validate labels on load).
#pragma once

#include "framework/core/tensor.h"

namespace vitddp::cuda {

void cross_entropy_forward(const Tensor& logits, const Tensor& target, double eps, const Tensor& loss);
void cross_entropy_backward(const Tensor& logits, const Tensor& target, double eps, const Tensor& dloss,
                            const Tensor& dlogits);

}  // namespace vitddp::cuda
