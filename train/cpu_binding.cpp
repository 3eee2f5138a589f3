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

namespace {

void check_fit(int64_t per_rank, int64_t local_ranks, size_t have) {
  VITDDP_CHECK(per_rank >= 1, "--bind-cpus: need at least 1 CPU per rank, got ", per_rank);
  VITDDP_CHECK(per_rank * local_ranks <= static_cast<int64_t>(have), "--bind-cpus ", per_rank, ": ", local_ranks,
               " rank(s) on this machine need ", per_rank * local_ranks, " CPUs of their own, but this process may use ",
               have);
}

}  // namespace

void check_rank_cpus_fit(int64_t per_rank, int64_t local_ranks) {
  check_fit(per_rank, local_ranks, allowed_cpus().size());
}

std::vector<int> bind_thread_to_rank_cpus(int64_t per_rank, int local_rank) {
  VITDDP_CHECK(local_rank >= 0, "--bind-cpus: local rank must be >= 0, got ", local_rank);
  const std::vector<int> cpus = allowed_cpus();
  check_fit(per_rank, local_rank + 1, cpus.size());
  const int64_t first = per_rank * local_rank;
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> chosen(cpus.begin() + first, cpus.begin() + first + per_rank);
  for (int c : chosen) CPU_SET(c, &set);
  const int err = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  VITDDP_CHECK(err == 0, "--bind-cpus: cannot hold the training thread to CPUs ", cpu_list(chosen), ": ",
               std::strerror(err));
  return chosen;
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (int c : cpus) out += (out.empty() ? "" : ",") + std::to_string(c);
  return out;
}

}  // namespace vitddp
