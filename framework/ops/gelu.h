// GELU with the exact erf form, as torch.nn.GELU() (approximate='none') in torchvision's MLP.
#pragma once

#include "framework/core/tensor.h"

namespace vitddp {

Tensor gelu(const Tensor& x);  // 0.5 x (1 + erf(x / sqrt(2)))

}  // namespace vitddp
