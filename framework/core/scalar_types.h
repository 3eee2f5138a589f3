// C++ element types per DType on the CPU (Eigen's half and bfloat16 for the 16-bit formats),
// and a dispatcher that calls a generic lambda with a value of the matching type.
#pragma once

#include <Eigen/Core>
#include <cstdint>

#include "framework/core/dtype.h"
#include "framework/core/error.h"

namespace vitddp {

using bf16_t = Eigen::bfloat16;
using f16_t = Eigen::half;

template <typename Fn>
decltype(auto) dispatch_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn(float{});
    case DType::kF64: return fn(double{});
    case DType::kBF16: return fn(bf16_t{});
    case DType::kF16: return fn(f16_t{});
    case DType::kI64: return fn(int64_t{});
  }
  throw Error("unknown dtype", ErrorKind::kInternal);
}

// For CPU arithmetic kernels: f32 and f64 only; `op` names the caller in the error.
template <typename Fn>
decltype(auto) dispatch_float(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn(float{});
    case DType::kF64: return fn(double{});
    default: break;
  }
  throw Error(std::string(op) + ": CPU kernels support f32 and f64, got " + dtype_name(dtype));
}

}  // namespace vitddp
