// Helpers shared by the CUDA kernels: float conversion for the 16-bit types, dtype dispatch
// for floating kernels, warp/block reductions, and launch shapes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "framework/core/dtype.h"
#include "framework/core/error.h"

namespace vitddp::cuda {

template <typename T>
__device__ __forceinline__ float to_f(T v) {
  return static_cast<float>(v);
}
template <>
__device__ __forceinline__ float to_f(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float to_f(__half v) {
  return __half2float(v);
}
template <typename T>
__device__ __forceinline__ T from_f(float v) {
  return static_cast<T>(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f(float v) {
  return __float2bfloat16(v);
}
template <>
__device__ __forceinline__ __half from_f(float v) {
  return __float2half(v);
}

// Calls fn(T{}) for f32, bf16 and f16 (computing in f32 inside the kernels).
template <typename Fn>
void dispatch_floating(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: fn(float{}); return;
    case DType::kBF16: fn(__nv_bfloat16{}); return;
    case DType::kF16: fn(__half{}); return;
    default: break;
  }
  throw Error(std::string(op) + ": CUDA kernels support f32, bf16 and f16, got " + dtype_name(dtype));
}

// Calls fn(T{}, E{}) for a bucket of type T (as dispatch_floating) and a buffer beside it of f32
// or T, whichever `wide` is (PowerSGD's error feedback; checked by the caller).
template <typename Fn>
void dispatch_bucket_and_error(DType bucket, DType wide, const char* op, Fn&& fn) {
  dispatch_floating(bucket, op, [&](auto zero) {
    if (wide == DType::kF32) return fn(zero, float{});
    fn(zero, zero);
  });
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over a block of up to 1024 threads; every thread gets the result. `scratch` holds 32.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

constexpr int kThreads = 256;

inline unsigned grid_for(int64_t n, int threads = kThreads) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads, 1 << 20)));
}

#define VITDDP_GRID_STRIDE_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// Elements [from, n) over the grid: the scalar tail after a loop over quads.
#define VITDDP_GRID_STRIDE_LOOP_FROM(i, from, n)                                      \
  for (int64_t i = (from) + blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

// N consecutive elements moved in one access; N = 4 is a quad (16 bytes of f32, 8 of bf16 or
// f16): a long elementwise pass over quads issues a quarter of the memory instructions and
// index computations; N * sizeof(T) = 16 is a 16-byte word (layer norm's rows). Pack k holds
// elements [k * N, k * N + N); p must be aligned to N * sizeof(T).
template <typename T, int N>
struct alignas(N * sizeof(T)) Pack {
  T v[N];
};

template <int N, typename T>
__device__ __forceinline__ void load_pack(const T* p, int64_t k, float (&out)[N]) {
  const Pack<T, N> w = reinterpret_cast<const Pack<T, N>*>(p)[k];
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = to_f(w.v[i]);
}

template <int N, typename T>
__device__ __forceinline__ void store_pack(T* p, int64_t k, const float (&in)[N]) {
  Pack<T, N> w;
#pragma unroll
  for (int i = 0; i < N; ++i) w.v[i] = from_f<T>(in[i]);
  reinterpret_cast<Pack<T, N>*>(p)[k] = w;
}

// N floats (a multiple of 4) from a 16-byte aligned row, through the read-only path: a row of
// PowerSGD's factors P or Q, which many warps read.
template <int N>
__device__ __forceinline__ void load_factor_row(const float* __restrict__ src, float (&out)[N]) {
#pragma unroll
  for (int t = 0; t < N; t += 4) {
    const float4 w = __ldg(reinterpret_cast<const float4*>(src + t));
    out[t] = w.x, out[t + 1] = w.y, out[t + 2] = w.z, out[t + 3] = w.w;
  }
}

// Whether `p` (of elements of `element_bytes`) may be read as quads; a null pointer may.
inline bool quad_aligned(const void* p, size_t element_bytes) {
  return reinterpret_cast<uintptr_t>(p) % (4 * element_bytes) == 0;
}

}  // namespace vitddp::cuda
