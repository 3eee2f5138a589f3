#include "distributed/cuda_loading.h"

#include <cstdlib>
#include <string>

namespace vitddp {

// Note [Copy engines and lazily loaded kernels]
// With NCCL's copy-engine transports (NCCL_SHM_USE_CUDA_MEMCPY=1, NCCL_P2P_USE_CUDA_MEMCPY=1)
// a running NCCL kernel waits for copies that NCCL's proxy thread issues with CUDA calls. CUDA
// loads a kernel's module at its first launch (CUDA_MODULE_LOADING=LAZY, the default), and a
// load may wait for the running kernels, holding the driver's lock meanwhile: the proxy's next
// call waits for that lock, the NCCL kernel for the proxy, the load for the NCCL kernel. The
// thread stacks of a stalled 2-GPU run (docs/performance.md, "Copy engines for the shared-memory
// transport") show exactly this: the main thread inside cuLaunchKernel at the first launch of a
// backward kernel, NCCL's proxy and our watchdog waiting for the driver's lock. The CUDA
// programming guide names this risk of lazy loading ("kernels that wait for other kernels").
// Loading every kernel when CUDA starts removes the first link of the cycle. The weights'
// broadcast is waited for on the host for the same reason (train/ddp_wiring.cpp).
CudaLoadingDecision decide_cuda_loading(const std::function<const char*(const char*)>& getenv) {
  auto is_one = [&](const char* name) {
    const char* value = getenv(name);
    return value && std::string(value) == "1";
  };
  CudaLoadingDecision decision;
  const bool shm = is_one("NCCL_SHM_USE_CUDA_MEMCPY");
  const bool p2p = is_one("NCCL_P2P_USE_CUDA_MEMCPY");
  if (!shm && !p2p) return decision;
  const std::string setting = shm ? "NCCL_SHM_USE_CUDA_MEMCPY=1" : "NCCL_P2P_USE_CUDA_MEMCPY=1";
  const char* loading = getenv("CUDA_MODULE_LOADING");
  const std::string mode = loading ? loading : "";
  if (mode.empty()) {
    decision.set_eager = true;
    decision.message = "note: " + setting +
                       ": CUDA loads every kernel at start (CUDA_MODULE_LOADING=EAGER), since a kernel loaded "
                       "lazily while a copy-engine collective runs can deadlock with NCCL's proxy thread";
  } else if (mode != "EAGER") {
    decision.message = "warning: CUDA_MODULE_LOADING=" + mode + " with " + setting +
                       " can deadlock (a kernel loaded while a copy-engine collective runs); the watchdog will stop "
                       "such a run. Unset it, or set EAGER";
  }
  return decision;
}

void prepare_cuda_loading_for_nccl(std::ostream& log, bool announce) {
  const CudaLoadingDecision decision = decide_cuda_loading([](const char* name) { return std::getenv(name); });
  if (decision.set_eager) setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  if (announce && !decision.message.empty()) log << decision.message << "\n";
}

}  // namespace vitddp
