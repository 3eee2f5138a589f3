// How CUDA loads kernels, decided before CUDA starts, from the NCCL settings the run uses.
// See Note [Copy engines and lazily loaded kernels] in the .cpp.
#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace vitddp {

struct CudaLoadingDecision {
  bool set_eager = false;  // set CUDA_MODULE_LOADING=EAGER before CUDA starts
  std::string message;     // one line for the user, or empty
};

// Pure: reads the environment through `getenv` (NCCL_SHM_USE_CUDA_MEMCPY,
// NCCL_P2P_USE_CUDA_MEMCPY, CUDA_MODULE_LOADING).
CudaLoadingDecision decide_cuda_loading(const std::function<const char*(const char*)>& getenv);

// Applies decide_cuda_loading to this process (before its first CUDA call) and writes the
// message, if any, to `log` when `announce`.
void prepare_cuda_loading_for_nccl(std::ostream& log, bool announce);

}  // namespace vitddp
