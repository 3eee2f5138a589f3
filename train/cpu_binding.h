// --bind-cpus: each rank's training thread held to CPUs of its own, apart from the other local
// ranks' (the usual cure where host-bound ranks share a machine; on the one-socket GPU machine
// it changed nothing, docs/performance.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vitddp {

// The CPUs the calling thread may run on (sched_getaffinity), in ascending order: the process's
// set for a thread that has not been bound.
std::vector<int> allowed_cpus();

// Throws vitddp::Error (one line) unless `local_ranks` ranks with `per_rank` CPUs each fit in
// allowed_cpus(): checked by the launcher before it starts them.
void check_rank_cpus_fit(int64_t per_rank, int64_t local_ranks);

// Holds the calling thread to `per_rank` CPUs: the local_rank-th group of `per_rank` among
// allowed_cpus(), so that ranks on one machine get disjoint ones. Threads started earlier (NCCL's,
// the watchdog) keep the whole set; threads the caller starts later inherit the binding. Returns
// the CPUs chosen. Throws vitddp::Error when they do not fit (check_rank_cpus_fit).
std::vector<int> bind_thread_to_rank_cpus(int64_t per_rank, int local_rank);

// "0,1,5": for the line each rank prints.
std::string cpu_list(const std::vector<int>& cpus);

}  // namespace vitddp
