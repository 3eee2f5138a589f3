#include "framework/core/mix64.h"
#include "framework/cuda/check.h"
#include "framework/cuda/dropout.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {

template <typename T>
__global__ void dropout_mask_kernel(T* mask, double p, float keep_scale, uint64_t seed, uint64_t counter, int64_t n) {
  VITDDP_GRID_STRIDE_LOOP(i, n) {
    double u = uniform_from_bits(mix64_inline(seed, counter + static_cast<uint64_t>(i)));
    mask[i] = from_f<T>(u < p ? 0.0f : keep_scale);
  }
}

}  // namespace

void dropout_mask(const Tensor& mask, double p, uint64_t seed, uint64_t counter) {
  const int64_t n = mask.numel();
  dispatch_floating(mask.dtype(), "dropout", [&](auto zero) {
    using T = decltype(zero);
    dropout_mask_kernel<T><<<grid_for(n), kThreads, 0, current_stream()>>>(
        mask.data<T>(), p, static_cast<float>(1.0 / (1.0 - p)), seed, counter, n);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace vitddp::cuda
