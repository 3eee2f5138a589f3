// Mean cross-entropy of logits against integer labels or soft targets, with label smoothing, as
// torch.nn.functional.cross_entropy(logits, target, label_smoothing=eps).
#pragma once

#include "framework/core/tensor.h"

namespace vitddp {

// logits (B, C) floating; target either labels (B) i64 in [0, C) or soft targets (B, C) in the
// logits' dtype (class probabilities, as Mixup and CutMix make); label_smoothing in [0, 1]
// mixes every target with the uniform distribution: t' = (1 - eps) t + eps / C. -> shape []
// (mean over B). Only the logits take a gradient.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing = 0.0);

}  // namespace vitddp
