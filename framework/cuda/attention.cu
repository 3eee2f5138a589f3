#include "framework/cuda/attention.h"
#include "framework/cuda/gemm.h"
#include "framework/cuda/softmax.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {

struct Dims {
  int64_t bh, nq, nk, d, dv;
};

Dims dims_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  return {q.size(0) * q.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
}

// Row-major per batch entry: C (rows, cols) = alpha * op(X) op(Y) with the usual swap.
// Each call below states the row-major product it computes.
GemmArgs batched(const Dims& s, DType dtype) {
  GemmArgs g;
  g.dtype = dtype;
  g.batch = s.bh;
  return g;
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& probs,
                       const Tensor& out) {
  const Dims s = dims_of(q, k, v);
  cudaStream_t stream = current_stream();
  {  // S (Nq, Nk) = scale * Q (Nq, d) K^T  ->  col-major S^T = K Q^T
    GemmArgs g = batched(s, q.dtype());
    g.trans_a = true;
    g.m = s.nk, g.n = s.nq, g.k = s.d;
    g.a = k.data_ptr(), g.lda = s.d, g.stride_a = s.nk * s.d;
    g.b = q.data_ptr(), g.ldb = s.d, g.stride_b = s.nq * s.d;
    g.c = probs.data_ptr(), g.ldc = s.nk, g.stride_c = s.nq * s.nk;
    g.alpha = static_cast<float>(scale);
    gemm(g, stream);
  }
  softmax_rows(probs.data_ptr(), probs.data_ptr(), probs.dtype(), s.bh * s.nq, s.nk);
  {  // O (Nq, dv) = P (Nq, Nk) V (Nk, dv)  ->  col-major O^T = V^T P^T
    GemmArgs g = batched(s, q.dtype());
    g.m = s.dv, g.n = s.nq, g.k = s.nk;
    g.a = v.data_ptr(), g.lda = s.dv, g.stride_a = s.nk * s.dv;
    g.b = probs.data_ptr(), g.ldb = s.nk, g.stride_b = s.nq * s.nk;
    g.c = out.data_ptr(), g.ldc = s.dv, g.stride_c = s.nq * s.dv;
    gemm(g, stream);
  }
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs, double scale,
                        const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const Dims s = dims_of(q, k, v);
  cudaStream_t stream = current_stream();
  if (dv.defined()) {  // dV (Nk, dv) = P^T dO  ->  col-major dV^T = dO^T P
    GemmArgs g = batched(s, q.dtype());
    g.trans_b = true;
    g.m = s.dv, g.n = s.nk, g.k = s.nq;
    g.a = dout.data_ptr(), g.lda = s.dv, g.stride_a = s.nq * s.dv;
    g.b = probs.data_ptr(), g.ldb = s.nk, g.stride_b = s.nq * s.nk;
    g.c = dv.data_ptr(), g.ldc = s.dv, g.stride_c = s.nk * s.dv;
    gemm(g, stream);
  }
  if (!dq.defined() && !dk.defined()) return;
  Tensor ds = Tensor::empty(probs.shape(), probs.dtype(), probs.device());  // (B, H, Nq, Nk)
  {  // dP (Nq, Nk) = dO V^T  ->  col-major dP^T = V dO^T
    GemmArgs g = batched(s, q.dtype());
    g.trans_a = true;
    g.m = s.nk, g.n = s.nq, g.k = s.dv;
    g.a = v.data_ptr(), g.lda = s.dv, g.stride_a = s.nk * s.dv;
    g.b = dout.data_ptr(), g.ldb = s.dv, g.stride_b = s.nq * s.dv;
    g.c = ds.data_ptr(), g.ldc = s.nk, g.stride_c = s.nq * s.nk;
    gemm(g, stream);
  }
  // dS = scale * P * (dP - <dP, P>), in place.
  softmax_rows_backward(probs.data_ptr(), ds.data_ptr(), ds.data_ptr(), ds.dtype(), s.bh * s.nq, s.nk,
                        static_cast<float>(scale));
  if (dq.defined()) {  // dQ (Nq, d) = dS K  ->  col-major dQ^T = K^T dS^T
    GemmArgs g = batched(s, q.dtype());
    g.m = s.d, g.n = s.nq, g.k = s.nk;
    g.a = k.data_ptr(), g.lda = s.d, g.stride_a = s.nk * s.d;
    g.b = ds.data_ptr(), g.ldb = s.nk, g.stride_b = s.nq * s.nk;
    g.c = dq.data_ptr(), g.ldc = s.d, g.stride_c = s.nq * s.d;
    gemm(g, stream);
  }
  if (dk.defined()) {  // dK (Nk, d) = dS^T Q  ->  col-major dK^T = Q^T dS
    GemmArgs g = batched(s, q.dtype());
    g.trans_b = true;
    g.m = s.d, g.n = s.nk, g.k = s.nq;
    g.a = q.data_ptr(), g.lda = s.d, g.stride_a = s.nq * s.d;
    g.b = ds.data_ptr(), g.ldb = s.nk, g.stride_b = s.nq * s.nk;
    g.c = dk.data_ptr(), g.ldc = s.d, g.stride_c = s.nk * s.d;
    gemm(g, stream);
  }
}

}  // namespace vitddp::cuda
