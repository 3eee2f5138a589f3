// Attention in strict f32 for any sequence length, FlashAttention-2's way, on the packed layouts
// the linear layers use: q, k and v read in place from qkv (B, N, 3D), the output written as
// (B, N, D), the gradients into dqkv (B, N, 3D), so no head split or merge is copied and no
// N x N probabilities are kept. Multiply-adds on the f32 cores (no tensor cores: the numbers
// of strict fp32, also under TF32, where it is as fast as the composed products on TF32 tensor
// cores and keeps no probabilities).
// The forward tiles over keys with an online softmax and keeps each row's log-sum-exp (B, H, N)
// for the backward, which recomputes the probabilities. The backward is deterministic: a block
// owns a tile of keys (its dK and dV complete in it) and writes its share of every query's dQ to
// a workspace of ceil(N / 64) x B x N x D floats, live during one layer's backward only, which
// one pass sums over the key tiles in order.
// See Note [Which attention runs] in framework/ops/multi_head_attention.cpp.
#pragma once

#include <cstdint>

#include "framework/core/tensor.h"

namespace vitddp::cuda {

// Whether these kernels take qkv (f32 on a GPU) with `num_heads` heads: head dims 64, 80, 128.
bool flash_f32_fits(const Tensor& qkv, int64_t num_heads);
// out (B, N, D) from qkv (B, N, 3D), both contiguous, qkv 16-byte aligned; lse (B, H, N) f32
// when defined (training).
void flash_f32_forward(const Tensor& qkv, int64_t num_heads, const Tensor& out, const Tensor& lse);
// dqkv (B, N, 3D) from qkv, the forward's out and lse, and dout (B, N, D); every element of
// dqkv is written.
void flash_f32_backward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout,
                        int64_t num_heads, const Tensor& dqkv);

}  // namespace vitddp::cuda
