#include "framework/cpu/gelu.h"

#include <cmath>

#include "framework/core/scalar_types.h"

namespace vitddp::cpu {

void gelu_forward(const Tensor& x, const Tensor& y) {
  dispatch_float(x.dtype(), "gelu", [&](auto zero) {
    using T = decltype(zero);
    const T* in = x.data<T>();  // (n)
    T* out = y.data<T>();       // (n)
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) out[i] = T(0.5) * in[i] * (T(1) + std::erf(in[i] * T(M_SQRT1_2)));
  });
}

void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  dispatch_float(x.dtype(), "gelu", [&](auto zero) {
    using T = decltype(zero);
    const T* in = x.data<T>();
    const T* g = dy.data<T>();
    T* out = dx.data<T>();
    const T inv_sqrt_2pi = T(0.5 * M_2_SQRTPI * M_SQRT1_2);
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) {
      T cdf = T(0.5) * (T(1) + std::erf(in[i] * T(M_SQRT1_2)));
      T pdf = inv_sqrt_2pi * std::exp(T(-0.5) * in[i] * in[i]);
      out[i] = g[i] * (cdf + in[i] * pdf);
    }
  });
}

}  // namespace vitddp::cpu
