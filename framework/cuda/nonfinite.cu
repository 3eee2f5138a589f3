#include "framework/cuda/check.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/nonfinite.h"
#include "framework/cuda/op_profiler.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {

__global__ void reset_kernel(unsigned long long* flag) { *flag = 0x7fffffffffffffffull; }

template <typename T>
__global__ void first_nonfinite_kernel(const T* g, int64_t n, unsigned long long* flag) {
  VITDDP_GRID_STRIDE_LOOP(i, n) {
    if (!isfinite(to_f(g[i]))) atomicMin(flag, static_cast<unsigned long long>(i));
  }
}

}  // namespace

void first_nonfinite(const Tensor& grads, const Tensor& flag) {
  OpScope scope("nonfinite check");
  auto* f = reinterpret_cast<unsigned long long*>(flag.data<int64_t>());
  reset_kernel<<<1, 1, 0, current_stream()>>>(f);
  CUDA_CHECK_LAUNCH();
  const int64_t n = grads.numel();
  dispatch_floating(grads.dtype(), "nonfinite check", [&](auto zero) {
    using T = decltype(zero);
    first_nonfinite_kernel<T><<<grid_for(n), kThreads, 0, current_stream()>>>(grads.data<T>(), n, f);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace vitddp::cuda
