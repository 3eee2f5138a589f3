// --bind-cpus: each rank's training thread held to CPUs of its own. Over NVLink a bf16 step is
// host-bound (docs/performance.md), and the same 2-GPU row moves by +-7% from run to run on one
// machine with the threads free to wander; holding each rank's issuing thread to its own CPUs,
// apart from the other rank's, is the usual cure for that.
#pragma once

#include <cstdint>
#include <vector>

namespace vitddp {

// The CPUs this process may run on (sched_getaffinity), in ascending order.
std::vector<int> allowed_cpus();

// Holds the calling thread to `per_rank` CPUs: the local_rank-th group of `per_rank` among
// allowed_cpus(), so that ranks on one machine get disjoint ones. Threads started earlier (NCCL's,
// the watchdog) keep the whole set; threads the caller starts later inherit the binding. Returns
// the CPUs chosen. Throws vitddp::Error naming the numbers when the machine has too few CPUs.
std::vector<int> bind_thread_to_rank_cpus(int64_t per_rank, int local_rank);

}  // namespace vitddp
