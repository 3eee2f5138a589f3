#include "framework/cpu/reduce.h"

#include "framework/core/scalar_types.h"
#include "framework/core/strided.h"
#include "framework/cpu/strided_iter.h"

namespace vitddp::cpu {

void sum_all(const Tensor& x, double factor, const Tensor& out) {
  dispatch_float(x.dtype(), "sum", [&](auto zero) {
    using T = decltype(zero);
    const T* in = static_cast<const T*>(x.data_ptr());
    double acc = 0;
    if (x.is_contiguous()) {
      // Four partial sums: shorter dependency chains, and a little more accurate.
      double s[4] = {0, 0, 0, 0};
      const int64_t n = x.numel();
      int64_t i = 0;
      for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; ++k) s[k] += static_cast<double>(in[i + k]);
      for (; i < n; ++i) s[0] += static_cast<double>(in[i]);
      acc = (s[0] + s[1]) + (s[2] + s[3]);
    } else if (x.numel() > 0) {
      Shape shape = x.shape();
      std::vector<int64_t> strides[1] = {x.strides()};
      coalesce_dims<1>(shape, strides);
      strided_for_each<1>(shape, strides, [&](int64_t i) { acc += static_cast<double>(in[i]); });
    }
    out.data<T>()[0] = static_cast<T>(acc * factor);
  });
}

void sum_to_shape(const Tensor& x, const Tensor& out) {
  dispatch_float(x.dtype(), "sum_to_shape", [&](auto zero) {
    using T = decltype(zero);
    const T* in = static_cast<const T*>(x.data_ptr());
    const int64_t n = out.numel();
    std::vector<double> acc(static_cast<size_t>(n), 0.0);
    if (x.numel() > 0) {
      Shape shape = x.shape();
      // Accumulator strides: out's contiguous strides, 0 along summed dims.
      std::vector<int64_t> strides[2] = {broadcast_strides(out, shape), x.strides()};
      coalesce_dims<2>(shape, strides);
      double* pa = acc.data();
      strided_for_each<2>(shape, strides, [&](int64_t o, int64_t i) { pa[o] += static_cast<double>(in[i]); });
    }
    T* po = out.data<T>();
    for (int64_t i = 0; i < n; ++i) po[i] = static_cast<T>(acc[i]);
  });
}

}  // namespace vitddp::cpu
