#include "framework/cuda/context.h"

#include <array>
#include <atomic>
#include <memory>
#include <mutex>

#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {
std::atomic<MatmulPrecision> g_precision{MatmulPrecision::kFp32};
std::atomic<bool> g_autotune{false};
std::atomic<bool> g_concurrent_weight_grads{false};
std::mutex g_cache_dir_mutex;
std::string g_cache_dir;
constexpr int kMaxDevices = 64;
// cuBLASLt's recommended workspace on Hopper is 32 MiB.
constexpr size_t kWorkspaceBytes = 32u << 20;
}  // namespace

void set_matmul_precision(MatmulPrecision precision) { g_precision.store(precision); }
void set_concurrent_weight_grads(bool on) { g_concurrent_weight_grads.store(on); }
bool concurrent_weight_grads() { return g_concurrent_weight_grads.load(); }
void set_gemm_autotune(bool on, const std::string& cache_dir) {
  std::lock_guard<std::mutex> lock(g_cache_dir_mutex);
  g_cache_dir = cache_dir;
  g_autotune.store(on);
}
bool gemm_autotune() { return g_autotune.load(); }
std::string gemm_algorithm_cache_dir() {
  std::lock_guard<std::mutex> lock(g_cache_dir_mutex);
  return g_cache_dir;
}
MatmulPrecision matmul_precision() { return g_precision.load(); }

CudaContext& CudaContext::for_device(int device) {
  VITDDP_CHECK(device >= 0 && device < kMaxDevices, "cuda device index ", device, " out of range");
  static std::array<std::unique_ptr<CudaContext>, kMaxDevices> contexts;
  static std::array<std::once_flag, kMaxDevices> once;
  std::call_once(once[device], [&] { contexts[device].reset(new CudaContext(device)); });
  return *contexts[device];
}

CudaContext::CudaContext(int device) : device_(device) {
  int previous = current_device();
  set_device(device);
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
  CUBLAS_CHECK(cublasLtCreate(&cublaslt_));
  workspace_bytes_ = kWorkspaceBytes;
  set_device(previous);
}

void* CudaContext::workspace(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(workspaces_mutex_);
  for (const auto& [s, ptr] : workspaces_)
    if (s == stream) return ptr;
  // A plain cudaMalloc, not the stream-ordered pool: the workspace lives as long as the process.
  // (A destroyed stream's handle, if CUDA hands it out again, gets its buffer: that stream no
  // longer runs anything.)
  const int previous = current_device();
  if (previous != device_) set_device(device_);
  void* ptr = nullptr;
  cudaError_t err = cudaMalloc(&ptr, workspace_bytes_);
  if (err == cudaErrorMemoryAllocation) {  // the tensor pool keeps freed blocks: give them back, retry
    cudaGetLastError();
    cudaMemPool_t pool = nullptr;
    if (cudaDeviceGetDefaultMemPool(&pool, device_) == cudaSuccess && cudaMemPoolTrimTo(pool, 0) == cudaSuccess)
      err = cudaMalloc(&ptr, workspace_bytes_);
  }
  if (previous != device_) set_device(previous);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw Error("out of memory on cuda:" + std::to_string(device_) + " allocating cuBLASLt's " +
                std::to_string(workspace_bytes_ >> 20) + " MiB workspace for another stream");
  }
  CUDA_CHECK(err);
  workspaces_.emplace_back(stream, ptr);
  return ptr;
}

CudaContext::~CudaContext() {
  // Contexts live until exit, when the driver may already be shutting down: warn only.
  for (const auto& [stream, ptr] : workspaces_) CUDA_WARN(cudaFree(ptr));
  if (cublaslt_) cublasLtDestroy(cublaslt_);
}

}  // namespace vitddp::cuda
