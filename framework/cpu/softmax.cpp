#include "framework/cpu/softmax.h"

#include <cmath>

#include "framework/core/scalar_types.h"

namespace vitddp::cpu {

template <typename T>
void softmax_rows(const T* in, T* out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = in + r * cols;
    T* yr = out + r * cols;
    T mx = -INFINITY;
    for (int64_t i = 0; i < cols; ++i) mx = xr[i] > mx ? xr[i] : mx;
    T sum = 0;
    for (int64_t i = 0; i < cols; ++i) {
      T e = std::exp(xr[i] - mx);
      yr[i] = e;
      sum += e;
    }
    const T inv = T(1) / sum;
    for (int64_t i = 0; i < cols; ++i) yr[i] *= inv;
  }
}

template <typename T>
void softmax_rows_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* yr = y + r * cols;
    const T* gr = dy + r * cols;
    T* dr = dx + r * cols;
    T dot = 0;
    for (int64_t i = 0; i < cols; ++i) dot += yr[i] * gr[i];
    for (int64_t i = 0; i < cols; ++i) dr[i] = yr[i] * (gr[i] - dot);
  }
}

template void softmax_rows<float>(const float*, float*, int64_t, int64_t);
template void softmax_rows<double>(const double*, double*, int64_t, int64_t);
template void softmax_rows_backward<float>(const float*, const float*, float*, int64_t, int64_t);
template void softmax_rows_backward<double>(const double*, const double*, double*, int64_t, int64_t);

void softmax_forward(const Tensor& x, const Tensor& y) {
  dispatch_float(x.dtype(), "softmax", [&](auto zero) {
    using T = decltype(zero);
    const int64_t cols = x.shape().back();
    const int64_t rows = cols > 0 ? x.numel() / cols : 0;
    softmax_rows<T>(x.data<T>(), y.data<T>(), rows, cols);
  });
}

void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  dispatch_float(y.dtype(), "softmax backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t cols = y.shape().back();
    const int64_t rows = cols > 0 ? y.numel() / cols : 0;
    softmax_rows_backward<T>(y.data<T>(), dy.data<T>(), dx.data<T>(), rows, cols);
  });
}

}  // namespace vitddp::cpu
