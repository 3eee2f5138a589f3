#include "framework/cuda/chunk_sum.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "framework/core/error.h"
#include "framework/core/nvtx.h"
#include "framework/cuda/check.h"
#include "framework/cuda/kernel_utils.cuh"

namespace vitddp::cuda {
namespace {

template <typename T>
__global__ void chunk_sum_kernel(T* dst, const T* src, int64_t n, float scale) {
  constexpr int N = 4;
  const bool quads = reinterpret_cast<uintptr_t>(dst) % (N * sizeof(T)) == 0 &&
                     reinterpret_cast<uintptr_t>(src) % (N * sizeof(T)) == 0;
  const int64_t vector_end = quads ? n / N * N : 0;
  VITDDP_GRID_STRIDE_LOOP(k, vector_end / N) {
    float a[N], b[N];
    load_pack<N>(dst, k, a);
    load_pack<N>(src, k, b);
#pragma unroll
    for (int e = 0; e < N; ++e) a[e] = (a[e] + b[e]) * scale;
    store_pack<N>(dst, k, a);
  }
  VITDDP_GRID_STRIDE_LOOP_FROM(i, vector_end, n) dst[i] = from_f<T>((to_f(dst[i]) + to_f(src[i])) * scale);
}

template <typename T>
void launch(void* dst, const void* src, int64_t n, float scale, cudaStream_t stream) {
  chunk_sum_kernel<T><<<grid_for((n + 3) / 4), kThreads, 0, stream>>>(static_cast<T*>(dst), static_cast<const T*>(src),
                                                                        n, scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void chunk_sum_forward(void* dst, const void* src, int64_t n, DType dtype, float scale, cudaStream_t stream) {
  VITDDP_NVTX_FN();
  if (n <= 0) return;
  switch (dtype) {
    case DType::kF32: return launch<float>(dst, src, n, scale, stream);
    case DType::kBF16: return launch<__nv_bfloat16>(dst, src, n, scale, stream);
    case DType::kF16: return launch<__half>(dst, src, n, scale, stream);
    default: throw Error(std::string("chunk_sum_forward: ") + dtype_name(dtype) + " is not f32, bf16 or f16",
                         ErrorKind::kInternal);
  }
}

}  // namespace vitddp::cuda
