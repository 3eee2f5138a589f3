#include "framework/cpu/elementwise.h"

#include "framework/core/scalar_types.h"
#include "framework/core/strided.h"
#include "framework/cpu/strided_iter.h"

namespace vitddp::cpu {
namespace {

template <typename T, typename Op>
void binary_loop(const Tensor& a, const Tensor& b, const Tensor& out, Op op) {
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  T* po = out.data<T>();  // contiguous
  const int64_t n = out.numel();
  if (a.shape() == out.shape() && b.shape() == out.shape() && a.is_contiguous() && b.is_contiguous()) {
    for (int64_t i = 0; i < n; ++i) po[i] = op(pa[i], pb[i]);
    return;
  }
  Shape shape = out.shape();
  std::vector<int64_t> strides[3] = {out.strides(), broadcast_strides(a, shape), broadcast_strides(b, shape)};
  coalesce_dims<3>(shape, strides);
  strided_for_each<3>(shape, strides, [&](int64_t o, int64_t i, int64_t j) { po[o] = op(pa[i], pb[j]); });
}

}  // namespace

void binary_forward(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (out.numel() == 0) return;
  const char* name = op == BinaryOp::kAdd ? "add" : "mul";
  dispatch_float(out.dtype(), name, [&](auto zero) {
    using T = decltype(zero);
    if (op == BinaryOp::kAdd)
      binary_loop<T>(a, b, out, [](T x, T y) { return x + y; });
    else
      binary_loop<T>(a, b, out, [](T x, T y) { return x * y; });
  });
}

void scale_forward(const Tensor& x, double factor, const Tensor& out) {
  if (out.numel() == 0) return;
  dispatch_float(x.dtype(), "scale", [&](auto zero) {
    using T = decltype(zero);
    const T* in = static_cast<const T*>(x.data_ptr());
    T* po = out.data<T>();  // contiguous
    const T f = static_cast<T>(factor);
    const int64_t n = out.numel();
    if (x.is_contiguous()) {
      for (int64_t i = 0; i < n; ++i) po[i] = in[i] * f;
      return;
    }
    Shape shape = out.shape();
    std::vector<int64_t> strides[2] = {out.strides(), x.strides()};
    coalesce_dims<2>(shape, strides);
    strided_for_each<2>(shape, strides, [&](int64_t o, int64_t i) { po[o] = in[i] * f; });
  });
}

}  // namespace vitddp::cpu
