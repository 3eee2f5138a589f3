#include "framework/cuda/check.h"
#include "framework/cuda/gelu.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {

template <typename T>
__global__ void gelu_forward_kernel(const T* x, T* y, int64_t n) {
  VITDDP_GRID_STRIDE_LOOP(i, n) {
    float v = to_f(x[i]);
    y[i] = from_f<T>(0.5f * v * (1.0f + erff(v * 0.70710678118654752f)));
  }
}

template <typename T>
__global__ void gelu_backward_kernel(const T* x, const T* dy, T* dx, int64_t n) {
  VITDDP_GRID_STRIDE_LOOP(i, n) {
    float v = to_f(x[i]);
    float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
    float pdf = 0.39894228040143268f * expf(-0.5f * v * v);
    dx[i] = from_f<T>(to_f(dy[i]) * (cdf + v * pdf));
  }
}

}  // namespace

void gelu_forward(const Tensor& x, const Tensor& y) {
  const int64_t n = x.numel();
  dispatch_floating(x.dtype(), "gelu", [&](auto zero) {
    using T = decltype(zero);
    gelu_forward_kernel<T><<<grid_for(n), kThreads, 0, current_stream()>>>(x.data<T>(), y.data<T>(), n);
    CUDA_CHECK_LAUNCH();
  });
}

void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  const int64_t n = x.numel();
  dispatch_floating(x.dtype(), "gelu backward", [&](auto zero) {
    using T = decltype(zero);
    gelu_backward_kernel<T><<<grid_for(n), kThreads, 0, current_stream()>>>(x.data<T>(), dy.data<T>(),
                                                                            dx.data<T>(), n);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace vitddp::cuda
