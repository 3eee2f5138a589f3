#include "framework/cpu/cross_entropy.h"

#include <cmath>

#include "framework/core/scalar_types.h"

namespace vitddp::cpu {
namespace {

template <typename T>
double row_max(const T* x, int64_t n) {
  double m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? static_cast<double>(x[i]) : m;
  return m;
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& labels, const Tensor& loss) {
  dispatch_float(logits.dtype(), "cross_entropy", [&](auto zero) {
    using T = decltype(zero);
    const int64_t B = logits.size(0), C = logits.size(1);
    const T* x = logits.data<T>();
    const int64_t* y = labels.data<int64_t>();
    for (int64_t r = 0; r < B; ++r)
      VITDDP_CHECK(y[r] >= 0 && y[r] < C, "cross_entropy: label ", y[r], " at position ", r,
                   " is out of range [0, ", C, ") for logits ", logits.description());
    double total = 0;
    for (int64_t r = 0; r < B; ++r) {
      const T* xr = x + r * C;
      const double m = row_max(xr, C);
      double s = 0;
      for (int64_t i = 0; i < C; ++i) s += std::exp(static_cast<double>(xr[i]) - m);
      total += m + std::log(s) - static_cast<double>(xr[y[r]]);
    }
    loss.data<T>()[0] = static_cast<T>(total / static_cast<double>(B));
  });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& dloss,
                            const Tensor& dlogits) {
  dispatch_float(logits.dtype(), "cross_entropy backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t B = logits.size(0), C = logits.size(1);
    const T* x = logits.data<T>();
    const int64_t* y = labels.data<int64_t>();
    T* dx = dlogits.data<T>();
    const double g = static_cast<double>(dloss.data<T>()[0]) / static_cast<double>(B);
    for (int64_t r = 0; r < B; ++r) {
      const T* xr = x + r * C;
      T* dr = dx + r * C;
      const double m = row_max(xr, C);
      double s = 0;
      for (int64_t i = 0; i < C; ++i) s += std::exp(static_cast<double>(xr[i]) - m);
      const double inv = 1.0 / s;
      for (int64_t i = 0; i < C; ++i)
        dr[i] = static_cast<T>((std::exp(static_cast<double>(xr[i]) - m) * inv - (i == y[r] ? 1.0 : 0.0)) * g);
    }
  });
}

}  // namespace vitddp::cpu
