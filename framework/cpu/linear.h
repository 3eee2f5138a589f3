// CPU matrix-product kernels (Eigen), f32 and f64, on contiguous row-major tensors.
#pragma once

#include <cstdint>

#include "framework/autograd/node.h"
#include "framework/core/matmul_strides.h"
#include "framework/core/tensor.h"

namespace vitddp::cpu {

// y (M, N) = x (M, K) @ w (N, K)^T + b (N); x and y may have any shape with M*K / M*N elements
// (K = w.size(1), N = w.size(0)). b may be undefined.
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y);
// dx = dy @ w, dw = dy^T @ x, db = column sums of dy; each output may be undefined (skipped).
// dw and db are overwritten, not accumulated.
void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx, const Tensor& dw,
                     const Tensor& db,
    GradWrite weight_grads = GradWrite::kOverwrite);

// c[i] (M, N) = a[i] (M, K) @ b[i] (K, N) for i < batch; with b_shared, b is one (K, N) matrix.
// `strides` place the batch entries (not with b_shared); see framework/core/matmul_strides.h.
void matmul_forward(const Tensor& a, const Tensor& b, const Tensor& c, int64_t batch, int64_t M, int64_t K,
                    int64_t N, bool b_shared, const MatmulStrides& strides = {});
// da = dc @ b^T, db = a^T @ dc (summed over the batch when b_shared); either may be undefined.
void matmul_backward(const Tensor& a, const Tensor& b, const Tensor& dc, const Tensor& da, const Tensor& db,
                     int64_t batch, int64_t M, int64_t K, int64_t N, bool b_shared, const MatmulStrides& strides = {});

}  // namespace vitddp::cpu
