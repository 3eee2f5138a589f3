// CUDA scaled dot-product attention as batched cuBLASLt products around a row softmax; same
// contract as cpu/attention.h (contiguous q (B,H,Nq,d), k (B,H,Nk,d), v (B,H,Nk,dv); probs
// (B,H,Nq,Nk) is an output of forward and an input of backward).
#pragma once

#include "framework/core/tensor.h"

namespace vitddp::cuda {

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& probs,
                       const Tensor& out);
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs, double scale,
                        const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv);

}  // namespace vitddp::cuda
