#include "framework/cuda/check.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/op_profiler.h"
#include "framework/cuda/optimizer.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {

template <typename G, typename P>
__global__ void sgd_kernel(float* p, const G* g, P* p16, float* buf, int64_t n, float lr, float mu, float wd,
                           const int64_t* skip) {
  if (skip && *skip != INT64_MAX) return;
  VITDDP_GRID_STRIDE_LOOP(i, n) {
    float w = p[i];
    float d = to_f(g[i]) + wd * w;
    if (buf) {
      d = mu * buf[i] + d;
      buf[i] = d;
    }
    w -= lr * d;
    p[i] = w;
    if (p16) p16[i] = from_f<P>(w);
  }
}

template <typename G, typename P>
__global__ void adamw_kernel(float* p, const G* g, P* p16, float* m, float* v, int64_t n, float decay, float b1,
                             float b2, float eps, float step_size, float inv_sqrt_bc2, const int64_t* skip) {
  if (skip && *skip != INT64_MAX) return;
  VITDDP_GRID_STRIDE_LOOP(i, n) {
    float gi = to_f(g[i]);
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float w = p[i] * decay - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    p[i] = w;
    if (p16) p16[i] = from_f<P>(w);
  }
}

// Calls fn(G{}, P{}) with the gradient and weight-copy element types.
template <typename Fn>
void dispatch_buffers(const FlatBuffers& b, Fn&& fn) {
  dispatch_floating(b.grad_dtype, "optimizer", [&](auto g) {
    dispatch_floating(b.params16 ? b.params16_dtype : DType::kBF16, "optimizer", [&](auto p) { fn(g, p); });
  });
}

}  // namespace

void sgd_step(const FlatBuffers& b, float* momentum, float lr, float mu, float wd) {
  OpScope scope("optimizer");
  dispatch_buffers(b, [&](auto g, auto p) {
    using G = decltype(g);
    using P = decltype(p);
    sgd_kernel<G, P><<<grid_for(b.n), kThreads, 0, current_stream()>>>(
        b.master, static_cast<const G*>(b.grads), static_cast<P*>(b.params16), momentum, b.n, lr, mu, wd, b.skip_if_set);
    CUDA_CHECK_LAUNCH();
  });
}

void adamw_step(const FlatBuffers& b, float* exp_avg, float* exp_avg_sq, float decay, float beta1, float beta2,
                float eps, float step_size, float inv_sqrt_bc2) {
  OpScope scope("optimizer");
  dispatch_buffers(b, [&](auto g, auto p) {
    using G = decltype(g);
    using P = decltype(p);
    adamw_kernel<G, P><<<grid_for(b.n), kThreads, 0, current_stream()>>>(
        b.master, static_cast<const G*>(b.grads), static_cast<P*>(b.params16), exp_avg, exp_avg_sq, b.n, decay, beta1,
        beta2, eps, step_size, inv_sqrt_bc2, b.skip_if_set);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace vitddp::cuda
