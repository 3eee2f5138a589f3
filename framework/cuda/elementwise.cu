#include "framework/cuda/elementwise.h"

#include "framework/cuda/check.h"
#include "framework/cuda/dispatch.cuh"
#include "framework/cuda/stream.h"
#include "framework/cuda/strided_index.cuh"

namespace vitddp::cuda {
namespace {

template <typename T>
__global__ void add_inplace_kernel(T* dst, StridedIndex dst_index, const T* src, StridedIndex src_index,
                                   double alpha, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    T& out = dst[dst_index.offset(i)];
    out = from_double<T>(to_double(out) + alpha * to_double(src[src_index.offset(i)]));
  }
}

}  // namespace

void add_inplace(const Tensor& dst, const Tensor& src, double alpha) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  CUDA_CHECK(cudaSetDevice(dst.device().index));
  constexpr int kThreads = 256;
  int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535 * 8));
  dispatch_cuda_dtype(dst.dtype(), [&](auto zero) {
    using T = decltype(zero);
    add_inplace_kernel<T><<<blocks, kThreads, 0, current_stream()>>>(static_cast<T*>(dst.data_ptr()), make_strided_index(dst),
                                                static_cast<const T*>(src.data_ptr()), make_strided_index(src),
                                                alpha, n);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace vitddp::cuda
