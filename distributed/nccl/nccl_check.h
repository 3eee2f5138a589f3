// NCCL_CHECK / NCCL_WARN, like CUDA_CHECK / CUDA_WARN (framework/cuda/check.h): the throwing form
// names the call, NCCL's error string and last error message, file and line; the warning form
// prints instead, for destructors.
//
// Both accept ncclInProgress: on a non-blocking communicator (ProcessGroupNccl's) a call may
// return it while its work is still being set up, and the caller must poll
// ncclCommGetAsyncError until ncclSuccess before the next NCCL call on that communicator (see
// wait_for_nccl in pg_nccl.cpp).
#pragma once

#include <nccl.h>

#include <cstdio>

#include "framework/core/error.h"

namespace vitddp::nccl {

// kPeer for errors that come from the other side (system and remote errors, a failed
// connection), kInternal for the rest (our misuse of the API, or CUDA failures).
ErrorKind nccl_error_kind(ncclResult_t result);
[[noreturn]] void throw_nccl_error(const char* call, ncclResult_t result, const char* file, int line);

}  // namespace vitddp::nccl

#define NCCL_CHECK(call)                                                                 \
  do {                                                                                   \
    ncclResult_t nccl_result_ = (call);                                                  \
    if (nccl_result_ != ncclSuccess && nccl_result_ != ncclInProgress)                   \
      ::vitddp::nccl::throw_nccl_error(#call, nccl_result_, __FILE__, __LINE__);         \
  } while (0)

#define NCCL_WARN(call)                                                                  \
  do {                                                                                   \
    ncclResult_t nccl_result_ = (call);                                                  \
    if (nccl_result_ != ncclSuccess && nccl_result_ != ncclInProgress)                   \
      std::fprintf(stderr, "vitddp: warning: %s failed: %s (%s:%d)\n", #call,            \
                   ncclGetErrorString(nccl_result_), __FILE__, __LINE__);                \
  } while (0)
