// Fused multi-head self-attention on packed qkv (B, N, 3D): one thread block per (batch, head)
// holds that head's q, k, v (and dO) in shared memory, so head split, head merge and the
// attention probabilities never touch device memory; backward recomputes the probabilities.
// bf16/f16 heads of 64 dims over at most 64 tokens run on tensor cores
// (multi_head_attention_tc.cu), everything else on the SIMT kernels.
#pragma once

#include <cstdint>

#include "framework/core/tensor.h"

namespace vitddp::cuda {

// Which kernels run: kAuto decides (see Note [Tensor-core attention] in multi_head_attention.cu);
// tests and benchmarks name one. kTensorCore on a dtype or shape it does not take is an error.
enum class MhaKernel { kAuto, kSimt, kTensorCore };

// Whether the fused kernels take this shape (shared memory bound).
bool fused_attention_fits(int64_t seq_len, int64_t head_dim);
// Whether kAuto runs this dtype and shape on the tensor-core kernels.
bool tensor_core_attention_fits(DType dtype, int64_t seq_len, int64_t head_dim);
// out (B, N, D) from qkv (B, N, 3D), contiguous, f32/bf16/f16.
void mha_forward(const Tensor& qkv, int64_t num_heads, const Tensor& out, MhaKernel kernel = MhaKernel::kAuto);
// dqkv (B, N, 3D) from qkv and dout (B, N, D); every element of dqkv is written.
void mha_backward(const Tensor& qkv, const Tensor& dout, int64_t num_heads, const Tensor& dqkv,
                  MhaKernel kernel = MhaKernel::kAuto);

}  // namespace vitddp::cuda
