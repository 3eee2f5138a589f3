// Scaled dot-product attention without mask or dropout, as in torchvision's ViT:
// softmax(q k^T / sqrt(head_dim)) v. One op with its own backward, so the GPU backend can
// replace it with one fused kernel.
#pragma once

#include "framework/core/tensor.h"

namespace vitddp {

// q, k, v: (B, H, N, head_dim) -> (B, H, N, head_dim)
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v);

}  // namespace vitddp
