// CPU scaled dot-product attention kernels, f32 and f64, on contiguous tensors; one Eigen
// product per (batch, head) matrix.
#pragma once

#include "framework/core/tensor.h"

namespace vitddp::cpu {

// q (B, H, Nq, d), k (B, H, Nk, d), v (B, H, Nk, dv) -> out (B, H, Nq, dv);
// probs (B, H, Nq, Nk) receives softmax(scale * q k^T).
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& probs,
                       const Tensor& out);
// Gradients for q, k, v from dout; each output may be undefined (skipped).
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs, double scale,
                        const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv);

}  // namespace vitddp::cpu
