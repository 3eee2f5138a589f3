#include "framework/cuda/check.h"
#include "framework/cuda/grad_norm.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/op_profiler.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {

constexpr int kNormThreads = 256;

// Block b's partial sum of squares (in f64 across the block) into partial[b].
template <typename T>
__global__ void partial_squares_kernel(const T* x, int64_t n, double* partial) {
  __shared__ double scratch[kNormThreads];
  double s = 0;
  VITDDP_GRID_STRIDE_LOOP(i, n) {
    const double v = to_f(x[i]);
    s += v * v;
  }
  scratch[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kNormThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) scratch[threadIdx.x] += scratch[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = scratch[0];
}

__global__ void add_partials_kernel(const double* partial, int blocks, double* acc) {
  double s = 0;
  for (int b = 0; b < blocks; ++b) s += partial[b];
  *acc += s;
}

__global__ void zero_kernel(double* acc) { *acc = 0; }

__global__ void clip_scale_kernel(const double* acc, double max_norm, float* norm, float* scale) {
  const double total = sqrt(*acc);
  *norm = static_cast<float>(total);
  *scale = static_cast<float>(fmin(1.0, max_norm / (total + 1e-6)));
}

}  // namespace

void add_sum_of_squares(const void* x, DType dtype, int64_t n, double* acc, double* scratch) {
  if (n == 0) return;
  OpScope scope("grad_norm");
  dispatch_floating(dtype, "grad_norm", [&](auto zero) {
    using T = decltype(zero);
    partial_squares_kernel<T><<<kGradNormBlocks, kNormThreads, 0, current_stream()>>>(static_cast<const T*>(x), n,
                                                                                     scratch);
    CUDA_CHECK_LAUNCH();
  });
  add_partials_kernel<<<1, 1, 0, current_stream()>>>(scratch, kGradNormBlocks, acc);
  CUDA_CHECK_LAUNCH();
}

void zero_sum_of_squares(double* acc) {
  OpScope scope("grad_norm");
  zero_kernel<<<1, 1, 0, current_stream()>>>(acc);
  CUDA_CHECK_LAUNCH();
}

void clip_scale_from_squares(const double* acc, double max_norm, float* norm, float* scale) {
  OpScope scope("grad_norm");
  clip_scale_kernel<<<1, 1, 0, current_stream()>>>(acc, max_norm, norm, scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp::cuda
