#include "train/run_facts.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#if VITDDP_WITH_CUDA
#include "framework/cuda/device.h"
#endif

namespace vitddp {
namespace {

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

RunFacts detect_run_facts(const RankEnvironment& env, const Device& device) {
  RunFacts f;
  f.gpu = device.is_cuda();
  f.world_size = std::max(1, env.world_size);
  // Our launcher and torchrun say how many ranks this machine runs; a world of one is one host.
  const int local_world = env.local_world_size > 0 ? env.local_world_size : (f.world_size == 1 ? 1 : 0);
  f.single_host = local_world == f.world_size;
  f.cpus_per_rank = std::max(1, usable_cpus() / std::max(1, local_world));
  if (!f.gpu || f.world_size < 2) return f;
  if (const char* p2p = std::getenv("NCCL_P2P_DISABLE"); p2p && std::string(p2p) == "1") {
    f.peer_access = false;
    f.no_peer_access_why = "NCCL_P2P_DISABLE=1";
    return f;
  }
#if VITDDP_WITH_CUDA
  if (f.single_host && cuda::visible_device_count() >= f.world_size) {
    for (int a = 0; a < f.world_size && f.peer_access; ++a)
      for (int b = 0; b < f.world_size && f.peer_access; ++b)
        if (a != b && !cuda::can_access_peer(a, b)) {
          f.peer_access = false;
          f.no_peer_access_why = "no peer access between GPU " + std::to_string(a) + " and GPU " + std::to_string(b);
        }
  }
#endif
  return f;
}

}  // namespace vitddp
