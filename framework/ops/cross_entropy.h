// Mean cross-entropy of logits against integer labels, as torch.nn.functional.cross_entropy.
#pragma once

#include "framework/core/tensor.h"

namespace vitddp {

// logits (B, C) floating, labels (B) i64 in [0, C) -> shape [] (mean over B).
Tensor cross_entropy(const Tensor& logits, const Tensor& labels);

}  // namespace vitddp
