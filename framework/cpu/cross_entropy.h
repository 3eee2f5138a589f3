// CPU cross-entropy kernels, f32 and f64 logits with i64 labels, on contiguous tensors.
#pragma once

#include "framework/core/tensor.h"

namespace vitddp::cpu {

// loss (shape []) = mean over rows of logsumexp(logits[r]) - logits[r, labels[r]], accumulated
// in double. Throws naming the first label outside [0, C) and its position.
void cross_entropy_forward(const Tensor& logits, const Tensor& labels, const Tensor& loss);
// dlogits = (softmax(logits) - onehot(labels)) * dloss / B, with dloss a one-element tensor.
void cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& dloss,
                            const Tensor& dlogits);

}  // namespace vitddp::cpu
