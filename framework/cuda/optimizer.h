// Fused optimizer updates over flat f32 buffers: one launch per step for every parameter.
#pragma once

#include <cstdint>

namespace vitddp::cuda {

// PyTorch SGD: d = g + wd p; buf = mu buf + d; p -= lr (mu > 0 ? buf : d).
void sgd_step(float* params, const float* grads, float* momentum, int64_t n, float lr, float mu, float wd);
// PyTorch AdamW with bias corrections folded into step_size and inv_sqrt_bc2.
void adamw_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, int64_t n, float decay,
                float beta1, float beta2, float eps, float step_size, float inv_sqrt_bc2);

}  // namespace vitddp::cuda
