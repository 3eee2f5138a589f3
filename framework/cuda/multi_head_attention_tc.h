// Tensor-core fused multi-head attention (mma.sync, fp32 accumulation) for bf16/f16 (m16n8k16)
// and f32 as TF32 (m16n8k8; 3xTF32 unless the matmul precision is kTf32) heads of 64 dims over
// at most 64 tokens, on the packed layout of multi_head_attention.h.
// Internal to framework/cuda: mha_forward / mha_backward decide when it runs (see Note
// [Tensor-core attention] in multi_head_attention.cu); these launchers assume the shape fits.
#pragma once

#include <cstdint>

#include "framework/core/tensor.h"

namespace vitddp::cuda {

// Every head is padded to one 64 x 64 tile (tokens x head dims) in shared memory.
constexpr int64_t kTcHeadDim = 64;
constexpr int64_t kTcMaxSeqLen = 64;

// dtype bf16/f16/f32, head_dim == 64, 1 <= seq_len <= 64 (alignment is the caller's check).
bool tc_attention_fits(DType dtype, int64_t seq_len, int64_t head_dim);
// out (B, N, D) from qkv (B, N, 3D); contiguous, 16-byte aligned.
void mha_forward_tc(const Tensor& qkv, int64_t num_heads, const Tensor& out);
// dqkv (B, N, 3D) from qkv (B, N, 3D) and dout (B, N, D); every element of dqkv is written.
void mha_backward_tc(const Tensor& qkv, const Tensor& dout, int64_t num_heads, const Tensor& dqkv);

}  // namespace vitddp::cuda
