// One check macro per CUDA library. Each throws vitddp::Error naming the call, the library's
// error string, file and line; the *_WARN forms print instead, for destructors.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <curand.h>

#include <cstdio>
#include <string>

#include "framework/core/error.h"

namespace vitddp::cuda {

[[noreturn]] void throw_cuda_error(const char* library, const char* call, const std::string& what,
                                   const char* file, int line);
const char* cublas_status_string(cublasStatus_t status);
const char* curand_status_string(curandStatus_t status);

}  // namespace vitddp::cuda

#define CUDA_CHECK(call)                                                                          \
  do {                                                                                            \
    cudaError_t err_ = (call);                                                                    \
    if (err_ != cudaSuccess)                                                                      \
      ::vitddp::cuda::throw_cuda_error("CUDA", #call, cudaGetErrorString(err_), __FILE__, __LINE__); \
  } while (0)

#define CUDA_WARN(call)                                                                           \
  do {                                                                                            \
    cudaError_t err_ = (call);                                                                    \
    if (err_ != cudaSuccess)                                                                      \
      std::fprintf(stderr, "vitddp: warning: %s failed: %s (%s:%d)\n", #call, cudaGetErrorString(err_), \
                   __FILE__, __LINE__);                                                           \
  } while (0)

// After a kernel launch: catches bad launch configurations at once.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(call)                                                                        \
  do {                                                                                            \
    cublasStatus_t st_ = (call);                                                                  \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                             \
      ::vitddp::cuda::throw_cuda_error("cuBLAS", #call, ::vitddp::cuda::cublas_status_string(st_), \
                                       __FILE__, __LINE__);                                       \
  } while (0)

#define CURAND_CHECK(call)                                                                        \
  do {                                                                                            \
    curandStatus_t st_ = (call);                                                                  \
    if (st_ != CURAND_STATUS_SUCCESS)                                                             \
      ::vitddp::cuda::throw_cuda_error("cuRAND", #call, ::vitddp::cuda::curand_status_string(st_), \
                                       __FILE__, __LINE__);                                       \
  } while (0)
