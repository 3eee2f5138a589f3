// Scaled dot-product attention without mask or dropout, as in torchvision's ViT:
// softmax(q k^T / sqrt(head_dim)) v. One op with its own backward, so the GPU backend can
// replace it with one fused kernel.
#pragma once

#include "framework/core/tensor.h"

namespace vitddp {

// q, k, v: (B, H, N, head_dim) -> (B, H, N, head_dim)
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v);

}  // namespace vitddp

namespace vitddp {

// Multi-head self-attention on packed projections, as nn.MultiheadAttention computes it after
// its in_proj: qkv (B, N, 3D) holds q | k | v, each split into `num_heads` heads of D / num_heads
// -> (B, N, D) with the heads merged back. On the GPU, sequences that fit in shared memory run
// as one fused kernel per direction (no head split/merge copies, no stored probabilities; see
// cuda/multi_head_attention.cu); otherwise it is composed of the ops above.
Tensor multi_head_attention(const Tensor& qkv, int64_t num_heads);

}  // namespace vitddp
