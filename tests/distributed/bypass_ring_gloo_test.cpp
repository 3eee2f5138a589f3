// The straggler-aware ring all-reduce between CPU processes (ProcessGroupGloo with
// cpu_allreduce kRing / kBypassRing, over distributed/gloo/gloo_ring_transport): exact sums of
// integer-valued floats on 2 to 8 processes for every slow rank, with no delay, a delay under
// the wait and one of several waits, with and without the bypass; averages; other dtypes still
// take Gloo's own all-reduce; and a rank that dies mid-ring fails the others within the timeout.
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include "common/group_options.h"
#include "common/multiprocess.h"
#include "distributed/process_group.h"

namespace vitddp {
namespace {

using CpuAllreduce = ProcessGroupOptions::CpuAllreduce;

float value(int rank, int64_t i) { return static_cast<float>((rank + 1) * 1000 + i % 997); }

// Returns 0 when the sum is exact on this rank, else a code naming the case.
int check_sum(ProcessGroup& group, int64_t count, int code) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = value(group.rank(), i);
  Tensor t = Tensor::from_vector(std::vector<double>(v.begin(), v.end()), {count});
  group.allreduce(t, ReduceOp::kSum)->wait();
  const std::vector<double> got = t.to_vector();
  for (int64_t i = 0; i < count; ++i) {
    double want = 0;
    for (int r = 0; r < group.size(); ++r) want += value(r, i);
    if (got[static_cast<size_t>(i)] != want) return code;
  }
  return 0;
}

TEST(BypassRingGloo, ExactOnTwoToEightProcessesForEverySlowRank) {
  for (int n : {2, 3, 5, 8}) {
    testing::TempFolder folder("vitddp_bypass_gloo");
    const std::string path = folder.path();
    const std::vector<int> codes = testing::run_in_processes(
        n,
        [&](int rank) {
          int k = 0;
          for (int slow = 0; slow < n; ++slow)
            for (double delay : {0.0, 0.002, 0.03})
              for (CpuAllreduce algorithm : {CpuAllreduce::kBypassRing, CpuAllreduce::kRing}) {
                ++k;
                if (delay == 0.0 && slow > 0) continue;  // the same case as slow 0
                ProcessGroupOptions o =
                    testing::group_options(rank, n, path + "/case" + std::to_string(k), std::chrono::milliseconds(20000));
                o.cpu_allreduce = algorithm;
                o.bypass_wait = std::chrono::duration<double>(0.005);
                if (rank == slow) o.ring_reduce_delay = std::chrono::duration<double>(delay);
                auto group = make_gloo_process_group(o);
                if (int bad = check_sum(*group, 29 + n, 10 + k)) return bad;
              }
          return 0;
        },
        std::chrono::seconds(120));
    EXPECT_EQ(codes, std::vector<int>(static_cast<size_t>(n), 0)) << n << " processes: " << testing::describe_exit_codes(codes);
  }
}

TEST(BypassRingGloo, AveragesAndOtherDtypes) {
  const int n = 4;
  testing::TempFolder folder("vitddp_bypass_gloo_avg");
  const std::string path = folder.path();
  const std::vector<int> codes = testing::run_in_processes(
      n,
      [&](int rank) {
        ProcessGroupOptions o = testing::group_options(rank, n, path);
        o.cpu_allreduce = CpuAllreduce::kBypassRing;
        if (rank == 2) o.ring_reduce_delay = std::chrono::duration<double>(0.02);
        auto group = make_gloo_process_group(o);
        Tensor avg = Tensor::from_vector({4.0 * (rank + 1), 8.0, -2.0 * rank}, {3});
        group->allreduce(avg, ReduceOp::kAvg)->wait();
        if (avg.to_vector() != std::vector<double>{10.0, 8.0, -3.0}) return 2;
        // f64 and i64 are Gloo's own.
        Tensor f64 = Tensor::from_vector({0.1 * rank}, {1}, DType::kF64);
        group->allreduce(f64, ReduceOp::kSum)->wait();
        if (std::fabs(f64.to_vector()[0] - 0.6) > 1e-12) return 3;
        Tensor least = Tensor::from_vector({static_cast<double>(5 - rank)}, {1});
        group->allreduce(least, ReduceOp::kMin)->wait();
        if (least.to_vector()[0] != 2.0) return 4;
        return check_sum(*group, 1000, 5);
      },
      std::chrono::seconds(60));
  EXPECT_EQ(codes, std::vector<int>(static_cast<size_t>(n), 0)) << testing::describe_exit_codes(codes);
}

// Rank 1 is killed in its first reduce: the others fail (an error, not a hang) within the
// group's timeout.
TEST(BypassRingGloo, ARankThatDiesMidRingFailsTheOthers) {
  const int n = 4;
  testing::TempFolder folder("vitddp_bypass_gloo_dead");
  const std::string path = folder.path();
  const std::vector<int> codes = testing::run_in_processes(
      n,
      [&](int rank) {
        ProcessGroupOptions o = testing::group_options(rank, n, path, std::chrono::milliseconds(3000));
        o.cpu_allreduce = CpuAllreduce::kBypassRing;
        if (rank == 1) o.ring_reduce_delay = std::chrono::duration<double>(0.5);
        auto group = make_gloo_process_group(o);
        Tensor t = Tensor::from_vector(std::vector<double>(64, 1.0), {64});
        if (rank == 1) {
          auto work = group->allreduce(t, ReduceOp::kSum);
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          std::raise(SIGKILL);
        }
        try {
          group->allreduce(t, ReduceOp::kSum)->wait();
        } catch (const Error& e) {
          return e.kind() == ErrorKind::kPeer || e.kind() == ErrorKind::kTimeout ? 0 : 3;
        }
        return 2;  // no error: the dead rank went unnoticed
      },
      std::chrono::seconds(30));
  EXPECT_EQ(codes[0], 0) << testing::describe_exit_codes(codes);
  EXPECT_EQ(codes[2], 0) << testing::describe_exit_codes(codes);
  EXPECT_EQ(codes[3], 0) << testing::describe_exit_codes(codes);
}

}  // namespace
}  // namespace vitddp
