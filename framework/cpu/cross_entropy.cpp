#include "framework/cpu/cross_entropy.h"

#include <cmath>

#include "framework/core/scalar_types.h"

namespace vitddp::cpu {
namespace {

// One row's smoothed target t'_c = (1 - eps) t_c + eps / C, from a label or a soft row.
template <typename T>
struct RowTarget {
  const int64_t* labels;  // null with soft targets
  const T* soft;          // (B, C), null with labels
  double eps;
  int64_t C;
  double at(int64_t r, int64_t c) const {
    const double t = labels ? (labels[r] == c ? 1.0 : 0.0) : static_cast<double>(soft[r * C + c]);
    return (1.0 - eps) * t + eps / static_cast<double>(C);
  }
};

template <typename T>
RowTarget<T> row_target(const Tensor& target, double eps, int64_t C) {
  const bool hard = target.dtype() == DType::kI64;
  return {hard ? target.data<int64_t>() : nullptr, hard ? nullptr : target.data<T>(), eps, C};
}

// logsumexp of a row, in double.
template <typename T>
double row_logsumexp(const T* x, int64_t n) {
  double m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? static_cast<double>(x[i]) : m;
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - m);
  return m + std::log(s);
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& target, double eps, const Tensor& loss) {
  dispatch_float(logits.dtype(), "cross_entropy", [&](auto zero) {
    using T = decltype(zero);
    const int64_t B = logits.size(0), C = logits.size(1);
    const T* x = logits.data<T>();
    const RowTarget<T> t = row_target<T>(target, eps, C);
    if (t.labels)
      for (int64_t r = 0; r < B; ++r)
        VITDDP_CHECK(t.labels[r] >= 0 && t.labels[r] < C, "cross_entropy: label ", t.labels[r], " at position ", r,
                     " is out of range [0, ", C, ") for logits ", logits.description());
    double total = 0;
    for (int64_t r = 0; r < B; ++r) {
      const T* xr = x + r * C;
      const double lse = row_logsumexp(xr, C);
      if (t.labels && eps == 0) {  // the common case: one term
        total += lse - static_cast<double>(xr[t.labels[r]]);
        continue;
      }
      for (int64_t c = 0; c < C; ++c) total += t.at(r, c) * (lse - static_cast<double>(xr[c]));
    }
    loss.data<T>()[0] = static_cast<T>(total / static_cast<double>(B));
  });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& target, double eps, const Tensor& dloss,
                            const Tensor& dlogits) {
  dispatch_float(logits.dtype(), "cross_entropy backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t B = logits.size(0), C = logits.size(1);
    const T* x = logits.data<T>();
    const RowTarget<T> t = row_target<T>(target, eps, C);
    T* dx = dlogits.data<T>();
    const double g = static_cast<double>(dloss.data<T>()[0]) / static_cast<double>(B);
    for (int64_t r = 0; r < B; ++r) {
      const T* xr = x + r * C;
      T* dr = dx + r * C;
      const double lse = row_logsumexp(xr, C);
      double mass = 0;  // sum_c t'_c: 1 for labels, the row's sum for soft targets
      for (int64_t c = 0; c < C; ++c) mass += t.at(r, c);
      for (int64_t c = 0; c < C; ++c)
        dr[c] = static_cast<T>((std::exp(static_cast<double>(xr[c]) - lse) * mass - t.at(r, c)) * g);
    }
  });
}

}  // namespace vitddp::cpu
