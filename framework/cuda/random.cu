#include "framework/core/mix64.h"
#include "framework/cuda/check.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/random.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {

template <typename T>
__global__ void normal_kernel(T* out, uint64_t seed, uint64_t counter, double mean, double std, int64_t n) {
  VITDDP_GRID_STRIDE_LOOP(i, n) {
    double u1 = uniform_from_bits(mix64_inline(seed, counter + 2 * uint64_t(i)));
    double u2 = uniform_from_bits(mix64_inline(seed, counter + 2 * uint64_t(i) + 1));
    if (u1 < 1e-300) u1 = 1e-300;
    out[i] = from_f<T>(static_cast<float>(mean + std * sqrt(-2.0 * log(u1)) * cospi(2.0 * u2)));
  }
}

__global__ void randint_kernel(int64_t* out, uint64_t seed, uint64_t counter, int64_t high, int64_t n) {
  VITDDP_GRID_STRIDE_LOOP(i, n) {
    out[i] = static_cast<int64_t>(mix64_inline(seed, counter + uint64_t(i)) % static_cast<uint64_t>(high));
  }
}

}  // namespace

void fill_normal(const Tensor& t, uint64_t seed, uint64_t counter, double mean, double std) {
  const int64_t n = t.numel();
  dispatch_floating(t.dtype(), "fill_normal", [&](auto zero) {
    using T = decltype(zero);
    normal_kernel<T><<<grid_for(n), kThreads, 0, current_stream()>>>(t.data<T>(), seed, counter, mean, std, n);
    CUDA_CHECK_LAUNCH();
  });
}

void fill_randint(const Tensor& t, uint64_t seed, uint64_t counter, int64_t high) {
  VITDDP_CHECK(high > 0, "fill_randint: high must be positive");
  const int64_t n = t.numel();
  randint_kernel<<<grid_for(n), kThreads, 0, current_stream()>>>(t.data<int64_t>(), seed, counter, high, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp::cuda
