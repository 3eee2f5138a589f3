#include "distributed/process_group.h"

#include <chrono>
#include <thread>

#include "framework/core/error.h"

#if VITDDP_WITH_GLOO
#include "distributed/gloo/pg_gloo.h"
#endif
#if VITDDP_WITH_NCCL
#include "distributed/nccl/pg_nccl.h"
#endif

namespace vitddp {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

void Work::wait_on_host() {
  wait();
  while (!done()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

std::unique_ptr<ProcessGroup> make_gloo_process_group(const ProcessGroupOptions& options) {
#if VITDDP_WITH_GLOO
  return std::make_unique<ProcessGroupGloo>(options);
#else
  (void)options;
  throw Error("this build has no Gloo: install libgloo-dev and reconfigure, or use the NCCL backend");
#endif
}

std::unique_ptr<ProcessGroup> make_nccl_process_group(const ProcessGroupOptions& options) {
#if VITDDP_WITH_NCCL
  return std::make_unique<ProcessGroupNccl>(options);
#else
  (void)options;
  throw Error("this build has no NCCL: it needs the CUDA backend (-DVITDDP_CUDA=ON) and NCCL's nccl.h and "
              "libnccl; use the Gloo backend for CPU tensors");
#endif
}

bool has_gloo_backend() { return VITDDP_WITH_GLOO != 0; }
bool has_nccl_backend() { return VITDDP_WITH_NCCL != 0; }

}  // namespace vitddp
