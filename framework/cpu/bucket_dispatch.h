// Dtype dispatch for the CPU's passes over a gradient bucket (PowerSGD's: low_rank.cpp,
// low_rank_project.cpp), as cuda::dispatch_floating / dispatch_bucket_and_error do on the GPU.
#pragma once

#include <string>

#include "framework/core/dtype.h"
#include "framework/core/error.h"
#include "framework/core/scalar_types.h"

namespace vitddp::cpu {

// Calls fn(T{}) for the element types a gradient bucket may have.
template <typename Fn>
void dispatch_bucket_dtype(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn(float{});
    case DType::kBF16: return fn(bf16_t{});
    case DType::kF16: return fn(f16_t{});
    default: break;
  }
  throw Error(std::string(op) + ": needs an f32, bf16 or f16 bucket, got " + dtype_name(dtype));
}

// Calls fn(T{}, E{}) for a bucket of T and a buffer beside it (PowerSGD's error, M) of f32 or T,
// whichever `wide` is (checked by the caller).
template <typename Fn>
void dispatch_bucket_and_error(DType bucket, DType wide, const char* op, Fn&& fn) {
  dispatch_bucket_dtype(bucket, op, [&](auto zero) {
    if (wide == DType::kF32) return fn(zero, float{});
    fn(zero, zero);
  });
}

}  // namespace vitddp::cpu
