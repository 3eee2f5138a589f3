// Matrix products through cuBLASLt, in cuBLAS's column-major convention:
//   C (m x n) = alpha * op(A) (m x k) * op(B) (k x n) + beta * C   [+ bias (m), epilogue]
// for `batch` products at fixed element strides. Row-major callers swap operands (see
// cuda/linear.cu). Plans (descriptors, layouts and the chosen algorithm) are cached per shape,
// so the steady state makes no heuristic queries; see Note [Choosing a GEMM algorithm].
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "framework/core/dtype.h"

namespace vitddp::cuda {

// kBias: C += bias (length m) broadcast over columns (forward). kBiasGradB: also bias := the
// sum of op(B) over the k dimension (length n), the bias gradient of a weight-gradient product.
enum class GemmEpilogue { kNone, kBias, kBiasGradB };

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
  // C in f32 where A and B are bf16 or f16 (products accumulate in f32 either way): PowerSGD's
  // P = M Q of a 16-bit M, whose small factors stay in f32.
  bool c_f32 = false;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // in elements, between batch entries
  float alpha = 1.0f;
  float beta = 0.0f;
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  const void* bias = nullptr;  // length m, read (kBias); length n, written (kBiasGradB)
};

void gemm(const GemmArgs& args, cudaStream_t stream);
// As gemm, but returns false (doing nothing) where cuBLASLt has no algorithm for the epilogue.
bool try_gemm(const GemmArgs& args, cudaStream_t stream);
// Whether this product's shape (with the current precision and carve-out) has its plan already,
// i.e. a call makes no heuristic query and times nothing.
bool gemm_planned(const GemmArgs& args);

}  // namespace vitddp::cuda
