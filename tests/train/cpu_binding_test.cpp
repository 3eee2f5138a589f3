// --bind-cpus: a rank's training thread held to its own CPUs, disjoint across local ranks, and
// a clear error where the machine has too few.
#include <gtest/gtest.h>
#include <sched.h>

#include <string>
#include <thread>
#include <vector>

#include "framework/core/error.h"
#include "train/cpu_binding.h"

namespace vitddp {
namespace {

// The CPUs the calling thread may run on.
std::vector<int> thread_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

TEST(CpuBinding, EachLocalRankGetsItsOwnCpus) {
  const std::vector<int> all = allowed_cpus();
  ASSERT_FALSE(all.empty());
  const int ranks = static_cast<int>(std::min<size_t>(all.size(), 2));
  for (int rank = 0; rank < ranks; ++rank) {
    // In a thread of its own, so that the test process keeps every CPU.
    std::vector<int> chosen, seen;
    std::thread([&] {
      chosen = bind_thread_to_rank_cpus(1, rank);
      seen = thread_cpus();
    }).join();
    EXPECT_EQ(chosen, std::vector<int>{all[rank]}) << "local rank " << rank;
    EXPECT_EQ(seen, chosen) << "local rank " << rank;
  }
}

TEST(CpuBinding, TooFewCpusIsAClearError) {
  const int64_t have = static_cast<int64_t>(allowed_cpus().size());
  std::thread([&] {
    try {
      bind_thread_to_rank_cpus(have, 1);  // local ranks 0 and 1 would need 2 * have
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("--bind-cpus " + std::to_string(have) + ": 2 rank(s) on this machine need " +
                          std::to_string(2 * have) + " CPUs of their own, but this process may use " +
                          std::to_string(have)),
                std::string::npos)
          << what;
    }
    EXPECT_EQ(thread_cpus(), allowed_cpus()) << "a failed binding changed the thread's CPUs";
    EXPECT_THROW(bind_thread_to_rank_cpus(0, 0), Error);
  }).join();
  EXPECT_NO_THROW(check_rank_cpus_fit(1, have));
  EXPECT_THROW(check_rank_cpus_fit(1, have + 1), Error);
}

TEST(CpuBinding, CpuListNamesEachCpu) {
  EXPECT_EQ(cpu_list({0, 2, 5}), "0,2,5");
  EXPECT_EQ(cpu_list({}), "");
}

}  // namespace
}  // namespace vitddp
