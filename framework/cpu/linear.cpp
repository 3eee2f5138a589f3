#include "framework/cpu/linear.h"

#include "framework/core/scalar_types.h"
#include "framework/cpu/eigen_maps.h"

namespace vitddp::cpu {

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  dispatch_float(x.dtype(), "linear", [&](auto zero) {
    using T = decltype(zero);
    const int64_t N = w.size(0), K = w.size(1);
    const int64_t M = K > 0 ? x.numel() / K : y.numel() / (N > 0 ? N : 1);
    ConstMatMap<T> X(x.data<T>(), M, K);
    ConstMatMap<T> W(w.data<T>(), N, K);
    MatMap<T> Y(y.data<T>(), M, N);
    Y.noalias() = X * W.transpose();
    if (b.defined()) Y.rowwise() += ConstVecMap<T>(b.data<T>(), N).transpose();
  });
}

void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx, const Tensor& dw,
                     const Tensor& db, GradWrite weight_grads) {
  dispatch_float(x.dtype(), "linear backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t N = w.size(0), K = w.size(1);
    const int64_t M = N > 0 ? dy.numel() / N : x.numel() / (K > 0 ? K : 1);
    ConstMatMap<T> DY(dy.data<T>(), M, N);
    if (dx.defined()) {
      MatMap<T> DX(dx.data<T>(), M, K);
      DX.noalias() = DY * ConstMatMap<T>(w.data<T>(), N, K);
    }
    const bool add = weight_grads == GradWrite::kAccumulate;
    if (dw.defined()) {
      MatMap<T> DW(dw.data<T>(), N, K);
      if (add)
        DW.noalias() += DY.transpose() * ConstMatMap<T>(x.data<T>(), M, K);
      else
        DW.noalias() = DY.transpose() * ConstMatMap<T>(x.data<T>(), M, K);
    }
    if (db.defined()) {
      if (add)
        VecMap<T>(db.data<T>(), N).noalias() += DY.colwise().sum().transpose();
      else
        VecMap<T>(db.data<T>(), N).noalias() = DY.colwise().sum().transpose();
    }
  });
}

void matmul_forward(const Tensor& a, const Tensor& b, const Tensor& c, int64_t batch, int64_t M, int64_t K,
                    int64_t N, bool b_shared, const MatmulStrides& strides) {
  dispatch_float(a.dtype(), "matmul", [&](auto zero) {
    using T = decltype(zero);
    if (b_shared) {  // one GEMM over all batch rows
      MatMap<T>(c.data<T>(), batch * M, N).noalias() =
          ConstMatMap<T>(a.data<T>(), batch * M, K) * ConstMatMap<T>(b.data<T>(), K, N);
      return;
    }
    const int64_t sa = strides.a_or(M * K), sb = strides.b_or(K * N), sc = strides.c_or(M * N);
    for (int64_t i = 0; i < batch; ++i)
      MatMap<T>(c.data<T>() + i * sc, M, N).noalias() =
          ConstMatMap<T>(a.data<T>() + i * sa, M, K) * ConstMatMap<T>(b.data<T>() + i * sb, K, N);
  });
}

void matmul_backward(const Tensor& a, const Tensor& b, const Tensor& dc, const Tensor& da, const Tensor& db,
                     int64_t batch, int64_t M, int64_t K, int64_t N, bool b_shared, const MatmulStrides& strides) {
  dispatch_float(a.dtype(), "matmul backward", [&](auto zero) {
    using T = decltype(zero);
    if (b_shared) {
      ConstMatMap<T> DC(dc.data<T>(), batch * M, N);
      if (da.defined())
        MatMap<T>(da.data<T>(), batch * M, K).noalias() = DC * ConstMatMap<T>(b.data<T>(), K, N).transpose();
      if (db.defined())
        MatMap<T>(db.data<T>(), K, N).noalias() = ConstMatMap<T>(a.data<T>(), batch * M, K).transpose() * DC;
      return;
    }
    const int64_t sa = strides.a_or(M * K), sb = strides.b_or(K * N), sc = strides.c_or(M * N);
    for (int64_t i = 0; i < batch; ++i) {
      ConstMatMap<T> DC(dc.data<T>() + i * sc, M, N);
      if (da.defined())
        MatMap<T>(da.data<T>() + i * sa, M, K).noalias() = DC * ConstMatMap<T>(b.data<T>() + i * sb, K, N).transpose();
      if (db.defined())
        MatMap<T>(db.data<T>() + i * sb, K, N).noalias() = ConstMatMap<T>(a.data<T>() + i * sa, M, K).transpose() * DC;
    }
  });
}

}  // namespace vitddp::cpu
