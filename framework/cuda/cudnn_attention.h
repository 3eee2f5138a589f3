// cuDNN's fused scaled-dot-product attention (its "flash attention" graphs, built through the
// cuDNN frontend) on the packed layouts the linear layers use: q, k and v are read in place
// from qkv (B, N, 3D), the output written as (B, N, D), the gradients into dqkv (B, N, 3D), so
// no head split or merge is copied. bf16/f16 only (cuDNN's fused attention has no f32 form).
// The forward keeps each row's softmax log-sum-exp (B, H, N) in f32 for the backward.
// See Note [Which attention runs] in framework/ops/multi_head_attention.cpp.
#pragma once

#include <cstdint>

#include "framework/core/tensor.h"

namespace vitddp::cuda {

// Whether the build has cuDNN's fused attention at all.
bool sdpa_compiled();
// Whether cuDNN takes qkv's dtype and shape with `num_heads` heads on qkv's device: the
// forward (with the log-sum-exp when `training`) and, when `training`, the backward are built
// on first ask and kept; a shape cuDNN refuses is remembered as refused.
bool sdpa_available(const Tensor& qkv, int64_t num_heads, bool training);
// out (B, N, D) from qkv (B, N, 3D), both contiguous; lse (B, H, N) f32 when defined.
void sdpa_forward(const Tensor& qkv, int64_t num_heads, const Tensor& out, const Tensor& lse);
// dqkv (B, N, 3D) from qkv, the forward's out and lse, and dout (B, N, D); every element of
// dqkv is written.
void sdpa_backward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout, int64_t num_heads,
                   const Tensor& dqkv);

}  // namespace vitddp::cuda
