// Matrix products through cuBLASLt, in cuBLAS's column-major convention:
//   C (m x n) = alpha * op(A) (m x k) * op(B) (k x n) + beta * C   [+ bias (m), epilogue]
// for `batch` products at fixed element strides. Row-major callers swap operands (see
// cuda/linear.cu). Plans (descriptors, layouts and the heuristic's algorithm) are cached per
// shape, so the steady state makes no heuristic queries.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "framework/core/dtype.h"

namespace vitddp::cuda {

enum class GemmEpilogue { kNone, kBias };

struct GemmArgs {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* c = nullptr;
  int64_t ldc = 0;
  DType dtype = DType::kF32;  // of A, B, C (and the bias)
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // in elements, between batch entries
  float alpha = 1.0f;
  float beta = 0.0f;
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  const void* bias = nullptr;  // length m, for kBias
};

void gemm(const GemmArgs& args, cudaStream_t stream);

}  // namespace vitddp::cuda
