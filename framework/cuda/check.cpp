#include "framework/cuda/check.h"

namespace vitddp::cuda {

void throw_cuda_error(const char* library, const char* call, const std::string& what, const char* file,
                      int line) {
  throw Error(std::string(library) + " error: " + call + " failed: " + what + " (" + file + ":" +
                  std::to_string(line) + ")",
              ErrorKind::kInternal);
}

const char* cublas_status_string(cublasStatus_t status) { return cublasGetStatusString(status); }

const char* curand_status_string(curandStatus_t status) {
  switch (status) {
    case CURAND_STATUS_SUCCESS: return "success";
    case CURAND_STATUS_VERSION_MISMATCH: return "version mismatch";
    case CURAND_STATUS_NOT_INITIALIZED: return "not initialized";
    case CURAND_STATUS_ALLOCATION_FAILED: return "allocation failed";
    case CURAND_STATUS_TYPE_ERROR: return "type error";
    case CURAND_STATUS_OUT_OF_RANGE: return "out of range";
    case CURAND_STATUS_LENGTH_NOT_MULTIPLE: return "length not a multiple";
    case CURAND_STATUS_DOUBLE_PRECISION_REQUIRED: return "double precision required";
    case CURAND_STATUS_LAUNCH_FAILURE: return "launch failure";
    case CURAND_STATUS_PREEXISTING_FAILURE: return "preexisting failure";
    case CURAND_STATUS_INITIALIZATION_FAILED: return "initialization failed";
    case CURAND_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CURAND_STATUS_INTERNAL_ERROR: return "internal error";
  }
  return "unknown cuRAND status";
}

}  // namespace vitddp::cuda
