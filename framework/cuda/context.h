// Per-device CUDA library state: the cuBLASLt handle and its workspace, and the matrix-product
// precision. Made on first use of a device, kept for the process.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <mutex>

#include <string>

#include "framework/core/tensor.h"

namespace vitddp::cuda {

// How f32 matrix products run: strict fp32 or TF32 tensor cores. bf16/f16 products always run
// on tensor cores with fp32 accumulation.
enum class MatmulPrecision { kFp32, kTf32 };
void set_matmul_precision(MatmulPrecision precision);
MatmulPrecision matmul_precision();

// Whether a linear layer's backward computes its weight gradient on a second stream beside its
// input gradient (Note [Weight gradient beside the input gradient] in cuda/linear.cu).
void set_concurrent_weight_grads(bool on);
bool concurrent_weight_grads();

// Whether a new matrix-product shape times cuBLASLt's candidate algorithms once and keeps the
// fastest, or takes the heuristic's first choice (the framework's default). With a cache
// folder, the choices are kept there per GPU (framework/io/algorithm_cache.h) and later runs
// make the same ones, so their results repeat bit for bit; without one ("") every process
// chooses afresh. See Note [Choosing a GEMM algorithm] in framework/cuda/gemm.cpp.
void set_gemm_autotune(bool on, const std::string& cache_dir = "");
bool gemm_autotune();
// How many of cuBLASLt's heuristic candidates autotuning times per new shape: more never found a
// faster algorithm for this model's shapes (docs/tried.md).
constexpr int kGemmCandidates = 8;
std::string gemm_algorithm_cache_dir();


class CudaContext {
 public:
  static CudaContext& for_device(int device);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  cublasLtHandle_t cublaslt() const { return cublaslt_; }
  // cuBLASLt's workspace for products on `stream`: one per stream, since products on two
  // streams (backward's and PowerSGD's) may run at once and must not share scratch memory.
  void* workspace(cudaStream_t stream);
  size_t workspace_bytes() const { return workspace_bytes_; }
  int device() const { return device_; }
  int sm_count() const { return sm_count_; }

 private:
  explicit CudaContext(int device);
  int device_;
  int sm_count_ = 0;
  cublasLtHandle_t cublaslt_ = nullptr;
  std::mutex workspaces_mutex_;
  std::vector<std::pair<cudaStream_t, void*>> workspaces_;  // plain cudaMalloc, kept until exit
  size_t workspace_bytes_ = 0;
};

}  // namespace vitddp::cuda
