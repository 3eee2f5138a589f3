#include "framework/cpu/attention.h"

#include "framework/core/scalar_types.h"
#include "framework/cpu/eigen_maps.h"
#include "framework/cpu/softmax.h"

namespace vitddp::cpu {

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& probs,
                       const Tensor& out) {
  dispatch_float(q.dtype(), "scaled_dot_product_attention", [&](auto zero) {
    using T = decltype(zero);
    const int64_t bh = q.size(0) * q.size(1), nq = q.size(2), d = q.size(3), nk = k.size(2), dv = v.size(3);
    for (int64_t i = 0; i < bh; ++i) {
      ConstMatMap<T> Q(q.data<T>() + i * nq * d, nq, d);
      ConstMatMap<T> K(k.data<T>() + i * nk * d, nk, d);
      ConstMatMap<T> V(v.data<T>() + i * nk * dv, nk, dv);
      MatMap<T> P(probs.data<T>() + i * nq * nk, nq, nk);
      MatMap<T> O(out.data<T>() + i * nq * dv, nq, dv);
      P.noalias() = (Q * K.transpose()) * static_cast<T>(scale);
      softmax_rows<T>(P.data(), P.data(), nq, nk);
      O.noalias() = P * V;
    }
  });
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs, double scale,
                        const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  dispatch_float(q.dtype(), "scaled_dot_product_attention backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t bh = q.size(0) * q.size(1), nq = q.size(2), d = q.size(3), nk = k.size(2), hv = v.size(3);
    RowMat<T> dS(nq, nk);
    for (int64_t i = 0; i < bh; ++i) {
      ConstMatMap<T> P(probs.data<T>() + i * nq * nk, nq, nk);
      ConstMatMap<T> dO(dout.data<T>() + i * nq * hv, nq, hv);
      if (dv.defined()) MatMap<T>(dv.data<T>() + i * nk * hv, nk, hv).noalias() = P.transpose() * dO;
      if (!dq.defined() && !dk.defined()) continue;
      // dP = dO V^T; dS = softmax backward of dP; scores were scale * Q K^T.
      dS.noalias() = dO * ConstMatMap<T>(v.data<T>() + i * nk * hv, nk, hv).transpose();
      softmax_rows_backward<T>(P.data(), dS.data(), dS.data(), nq, nk);
      dS *= static_cast<T>(scale);
      if (dq.defined())
        MatMap<T>(dq.data<T>() + i * nq * d, nq, d).noalias() =
            dS * ConstMatMap<T>(k.data<T>() + i * nk * d, nk, d);
      if (dk.defined())
        MatMap<T>(dk.data<T>() + i * nk * d, nk, d).noalias() =
            dS.transpose() * ConstMatMap<T>(q.data<T>() + i * nq * d, nq, d);
    }
  });
}

}  // namespace vitddp::cpu
