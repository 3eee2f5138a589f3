// Row-major products expressed in cuBLAS's column-major terms: a row-major (R, C) buffer is a
// column-major (C, R) matrix, so row-major Y = X W^T is column-major Y^T = W X^T.
#include "framework/cuda/gemm.h"
#include "framework/cuda/linear.h"
#include "framework/cuda/reduce.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  const int64_t n = w.size(0), k = w.size(1), m = x.numel() / k;
  if (m == 0) return;
  GemmArgs g;
  g.trans_a = true;  // W (N, K) row-major = (K, N) col-major; op = T gives (N, K)
  g.m = n;
  g.n = m;
  g.k = k;
  g.a = w.data_ptr();
  g.lda = k;
  g.b = x.data_ptr();
  g.ldb = k;
  g.c = y.data_ptr();
  g.ldc = n;
  g.dtype = x.dtype();
  if (b.defined()) {
    g.epilogue = GemmEpilogue::kBias;
    g.bias = b.data_ptr();
  }
  gemm(g, current_stream());
}

void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx, const Tensor& dw,
                     const Tensor& db, GradWrite weight_grads) {
  const int64_t n = w.size(0), k = w.size(1), m = x.numel() / k;
  if (dx.defined()) {  // dX (M, K) = dY (M, N) W (N, K)  ->  col-major dX^T = W^T dY^T
    GemmArgs g;
    g.m = k;
    g.n = m;
    g.k = n;
    g.a = w.data_ptr();
    g.lda = k;
    g.b = dy.data_ptr();
    g.ldb = n;
    g.c = dx.data_ptr();
    g.ldc = k;
    g.dtype = x.dtype();
    gemm(g, current_stream());
  }
  if (dw.defined()) {  // dW (N, K) = dY^T X  ->  col-major dW^T = X^T dY
    GemmArgs g;
    g.trans_b = true;
    g.m = k;
    g.n = n;
    g.k = m;
    g.a = x.data_ptr();
    g.lda = k;
    g.b = dy.data_ptr();
    g.ldb = n;
    g.c = dw.data_ptr();
    g.ldc = k;
    g.dtype = x.dtype();
    if (weight_grads == GradWrite::kAccumulate) g.beta = 1.0f;
    // A written (not accumulated) bias gradient comes out of the same product: the epilogue sums
    // dY's columns while dY passes through (one read of dY and one launch fewer). In training
    // that is the step's first gradient of a layer (Note [Gradients in place]); an added one
    // (a second micro-batch) takes the column sum below, as no cuBLASLt epilogue adds.
    if (db.defined() && weight_grads == GradWrite::kOverwrite && db.dtype() == x.dtype()) {
      GemmArgs fused = g;
      fused.epilogue = GemmEpilogue::kBiasGradB;
      fused.bias = db.data_ptr();
      if (try_gemm(fused, current_stream())) return;
    }
    gemm(g, current_stream());
  }
  if (db.defined())
    sum_rows(dy.data_ptr(), dy.dtype(), m, n, db.data_ptr(), weight_grads == GradWrite::kAccumulate);
}

void matmul_forward(const Tensor& a, const Tensor& b, const Tensor& c, int64_t batch, int64_t M, int64_t K, int64_t N,
                    bool b_shared, const MatmulStrides& strides) {
  // C (M, N) = A (M, K) B (K, N)  ->  col-major C^T = B^T A^T; a shared B folds the batch into M.
  GemmArgs g;
  g.m = N;
  g.n = b_shared ? batch * M : M;
  g.k = K;
  g.a = b.data_ptr();
  g.lda = N;
  g.b = a.data_ptr();
  g.ldb = K;
  g.c = c.data_ptr();
  g.ldc = N;
  g.dtype = a.dtype();
  if (!b_shared) {
    g.batch = batch;
    g.stride_a = strides.b_or(K * N);  // column-major operands are swapped: g.a is b
    g.stride_b = strides.a_or(M * K);
    g.stride_c = strides.c_or(M * N);
  }
  gemm(g, current_stream());
}

void matmul_backward(const Tensor& a, const Tensor& b, const Tensor& dc, const Tensor& da, const Tensor& db,
                     int64_t batch, int64_t M, int64_t K, int64_t N, bool b_shared, const MatmulStrides& strides) {
  if (da.defined()) {  // dA (M, K) = dC (M, N) B^T  ->  col-major dA^T = B dC^T
    GemmArgs g;
    g.trans_a = true;
    g.m = K;
    g.n = b_shared ? batch * M : M;
    g.k = N;
    g.a = b.data_ptr();
    g.lda = N;
    g.b = dc.data_ptr();
    g.ldb = N;
    g.c = da.data_ptr();
    g.ldc = K;
    g.dtype = a.dtype();
    if (!b_shared) {
      g.batch = batch;
      g.stride_a = strides.b_or(K * N);  // g.a is b, g.b is dc, g.c is da
      g.stride_b = strides.c_or(M * N);
      g.stride_c = strides.a_or(M * K);
    }
    gemm(g, current_stream());
  }
  if (db.defined()) {  // dB (K, N) = A^T dC  ->  col-major dB^T = dC^T A; a shared B sums over the batch
    GemmArgs g;
    g.trans_b = true;
    g.m = N;
    g.n = K;
    g.k = b_shared ? batch * M : M;
    g.a = dc.data_ptr();
    g.lda = N;
    g.b = a.data_ptr();
    g.ldb = K;
    g.c = db.data_ptr();
    g.ldc = N;
    g.dtype = a.dtype();
    if (!b_shared) {
      g.batch = batch;
      g.stride_a = strides.c_or(M * N);  // g.a is dc, g.b is a, g.c is db
      g.stride_b = strides.a_or(M * K);
      g.stride_c = strides.b_or(K * N);
    }
    gemm(g, current_stream());
  }
}

}  // namespace vitddp::cuda
