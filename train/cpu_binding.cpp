#include "train/cpu_binding.h"

#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <cstring>

#include "framework/core/error.h"

namespace vitddp {

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  VITDDP_CHECK(sched_getaffinity(0, sizeof set, &set) == 0, "--bind-cpus: cannot read this process's CPUs: ",
               std::strerror(errno));
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

std::vector<int> bind_thread_to_rank_cpus(int64_t per_rank, int local_rank) {
  VITDDP_CHECK(per_rank >= 1, "--bind-cpus: need at least 1 CPU per rank, got ", per_rank);
  VITDDP_CHECK(local_rank >= 0, "--bind-cpus: local rank must be >= 0, got ", local_rank);
  const std::vector<int> cpus = allowed_cpus();
  const int64_t first = per_rank * local_rank;
  VITDDP_CHECK(first + per_rank <= static_cast<int64_t>(cpus.size()), "--bind-cpus ", per_rank, ": local rank ",
               local_rank, " needs CPUs ", first, " to ", first + per_rank - 1, " of this machine's ", cpus.size(),
               " usable ones");
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> chosen(cpus.begin() + first, cpus.begin() + first + per_rank);
  for (int c : chosen) CPU_SET(c, &set);
  const int err = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  VITDDP_CHECK(err == 0, "--bind-cpus: cannot hold the training thread to its CPUs: ", std::strerror(err));
  return chosen;
}

}  // namespace vitddp
