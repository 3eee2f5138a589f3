#include "framework/cuda/check.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/optimizer.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {

__global__ void sgd_kernel(float* p, const float* g, float* buf, int64_t n, float lr, float mu, float wd) {
  VITDDP_GRID_STRIDE_LOOP(i, n) {
    float d = g[i] + wd * p[i];
    float b = mu * buf[i] + d;
    buf[i] = b;
    p[i] -= lr * (mu > 0.0f ? b : d);
  }
}

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n, float decay, float b1, float b2,
                             float eps, float step_size, float inv_sqrt_bc2) {
  VITDDP_GRID_STRIDE_LOOP(i, n) {
    float gi = g[i];
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
  }
}

}  // namespace

void sgd_step(float* params, const float* grads, float* momentum, int64_t n, float lr, float mu, float wd) {
  sgd_kernel<<<grid_for(n), kThreads, 0, current_stream()>>>(params, grads, momentum, n, lr, mu, wd);
  CUDA_CHECK_LAUNCH();
}

void adamw_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, int64_t n, float decay,
                float beta1, float beta2, float eps, float step_size, float inv_sqrt_bc2) {
  adamw_kernel<<<grid_for(n), kThreads, 0, current_stream()>>>(params, grads, exp_avg, exp_avg_sq, n, decay, beta1,
                                                               beta2, eps, step_size, inv_sqrt_bc2);
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp::cuda
