// Maps a DType to its CUDA element type (__nv_bfloat16, __half for the 16-bit formats).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "framework/core/dtype.h"
#include "framework/core/error.h"

namespace vitddp::cuda {

template <typename Fn>
void dispatch_cuda_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: fn(float{}); return;
    case DType::kF64: fn(double{}); return;
    case DType::kBF16: fn(__nv_bfloat16{}); return;
    case DType::kF16: fn(__half{}); return;
    case DType::kI64: fn(int64_t{}); return;
  }
  throw Error("unknown dtype", ErrorKind::kInternal);
}

template <typename T>
__host__ __device__ inline double to_double(T v) {
  return static_cast<double>(v);
}
template <>
__host__ __device__ inline double to_double(__nv_bfloat16 v) {
  return static_cast<double>(__bfloat162float(v));
}
template <>
__host__ __device__ inline double to_double(__half v) {
  return static_cast<double>(__half2float(v));
}

template <typename T>
__host__ __device__ inline T from_double(double v) {
  return static_cast<T>(v);
}
template <>
__host__ __device__ inline __nv_bfloat16 from_double(double v) {
  return __float2bfloat16(static_cast<float>(v));
}
template <>
__host__ __device__ inline __half from_double(double v) {
  return __float2half(static_cast<float>(v));
}

}  // namespace vitddp::cuda
