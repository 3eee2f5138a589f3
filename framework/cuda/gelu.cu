#include "framework/cuda/check.h"
#include "framework/cuda/gelu.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {

__device__ __forceinline__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); }

__device__ __forceinline__ float gelu_grad(float v, float dy) {
  const float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
  const float pdf = 0.39894228040143268f * expf(-0.5f * v * v);
  return dy * (cdf + v * pdf);
}

// kQuads: the operands are quad-aligned and all but the last n % 4 elements go four at a time.
template <typename T, bool kQuads>
__global__ void gelu_forward_kernel(const T* x, T* y, int64_t n) {
  const int64_t quads = kQuads ? n / 4 : 0;
  VITDDP_GRID_STRIDE_LOOP(q, quads) {
    float v[4];
    load_pack<4>(x, q, v);
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = gelu(v[i]);
    store_pack<4>(y, q, v);
  }
  VITDDP_GRID_STRIDE_LOOP_FROM(i, quads * 4, n) y[i] = from_f<T>(gelu(to_f(x[i])));
}

template <typename T, bool kQuads>
__global__ void gelu_backward_kernel(const T* x, const T* dy, T* dx, int64_t n) {
  const int64_t quads = kQuads ? n / 4 : 0;
  VITDDP_GRID_STRIDE_LOOP(q, quads) {
    float v[4], g[4];
    load_pack<4>(x, q, v);
    load_pack<4>(dy, q, g);
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = gelu_grad(v[i], g[i]);
    store_pack<4>(dx, q, v);
  }
  VITDDP_GRID_STRIDE_LOOP_FROM(i, quads * 4, n) dx[i] = from_f<T>(gelu_grad(to_f(x[i]), to_f(dy[i])));
}

}  // namespace

void gelu_forward(const Tensor& x, const Tensor& y) {
  const int64_t n = x.numel();
  dispatch_floating(x.dtype(), "gelu", [&](auto zero) {
    using T = decltype(zero);
    if (quad_aligned(x.data<T>(), sizeof(T)) && quad_aligned(y.data<T>(), sizeof(T))) {
      gelu_forward_kernel<T, true><<<grid_for(n / 4 + 1), kThreads, 0, current_stream()>>>(x.data<T>(), y.data<T>(), n);
    } else {
      gelu_forward_kernel<T, false><<<grid_for(n), kThreads, 0, current_stream()>>>(x.data<T>(), y.data<T>(), n);
    }
    CUDA_CHECK_LAUNCH();
  });
}

void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  const int64_t n = x.numel();
  dispatch_floating(x.dtype(), "gelu backward", [&](auto zero) {
    using T = decltype(zero);
    const bool quads = quad_aligned(x.data<T>(), sizeof(T)) && quad_aligned(dy.data<T>(), sizeof(T)) &&
                       quad_aligned(dx.data<T>(), sizeof(T));
    if (quads) {
      gelu_backward_kernel<T, true><<<grid_for(n / 4 + 1), kThreads, 0, current_stream()>>>(
          x.data<T>(), dy.data<T>(), dx.data<T>(), n);
    } else {
      gelu_backward_kernel<T, false><<<grid_for(n), kThreads, 0, current_stream()>>>(x.data<T>(), dy.data<T>(),
                                                                                     dx.data<T>(), n);
    }
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace vitddp::cuda
