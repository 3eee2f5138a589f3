// CUDA matrix products for linear and matmul, through cuBLASLt (cuda/gemm.h), on contiguous
// row-major f32/bf16/f16 tensors; same contracts as cpu/linear.h. The bias of linear is fused
// into the product's epilogue.
#pragma once

#include "framework/autograd/node.h"
#include "framework/core/matmul_strides.h"
#include "framework/core/tensor.h"

namespace vitddp::cuda {

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y);
void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx, const Tensor& dw,
                     const Tensor& db,
    GradWrite weight_grads = GradWrite::kOverwrite);
void matmul_forward(const Tensor& a, const Tensor& b, const Tensor& c, int64_t batch, int64_t M, int64_t K, int64_t N,
                    bool b_shared, const MatmulStrides& strides = {});
void matmul_backward(const Tensor& a, const Tensor& b, const Tensor& dc, const Tensor& da, const Tensor& db,
                     int64_t batch, int64_t M, int64_t K, int64_t N, bool b_shared, const MatmulStrides& strides = {});

}  // namespace vitddp::cuda
