// The host-copy all-reduce (Note [Host-copy all-reduce], transport host-copy) on two GPUs, one
// rank per thread: exact sums and averages in f32, bf16 and f16 over sizes from one element to
// many chunks per ring (slots reused), several collectives queued before any wait and mixed
// with NCCL's, back to back where they may overlap (Note [Back-to-back host copies]); sums
// bit-identical to NCCL's; a missing peer times out instead of hanging, the
// group's teardown included; and a failed peer fails the live rank too. Skipped without two GPUs.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>

#include "common/gpu.h"
#include "common/group_options.h"
#include "common/multiprocess.h"
#include "distributed/process_group.h"
#if VITDDP_WITH_NCCL
#include "distributed/nccl/pg_nccl.h"
#include "framework/cuda/stream.h"
#endif

namespace vitddp {
namespace {

#if VITDDP_WITH_NCCL

using namespace std::chrono_literals;

// Runs body(rank, host_copy_group, nccl_group) on two threads, thread r on cuda:r. `pipelined`:
// the host copy with ProcessGroupOptions::host_copy_overlap and host_copy_reduce_beside.
std::vector<std::string> run_pair(std::chrono::milliseconds timeout,
                                  const std::function<void(int, ProcessGroupNccl&, ProcessGroupNccl&)>& body,
                                  bool pipelined = false) {
  testing::TempFolder folder("vitddp_host_copy");
  return testing::run_on_gpu_threads(2, [&](int rank) {
    ProcessGroupOptions o = testing::group_options(rank, 2, folder.path(), timeout);
    ProcessGroupNccl plain(o);
    o.host_copy_allreduce = true;
    o.host_copy_overlap = pipelined;
    o.host_copy_reduce_beside = pipelined;
    ProcessGroupNccl host_copy(o);
    body(rank, host_copy, plain);
  });
}

// Rank r's element i: (r + 1) + (i mod 13), integers that every dtype here holds exactly, as
// it holds their sum (3 + 2 (i mod 13)) and its half.
Tensor pattern(int rank, int64_t n, DType dtype, int device) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = rank + 1.0 + static_cast<double>(i % 13);
  return Tensor::from_vector(v, {n}, DType::kF32).to(dtype).to(Device::cuda(device));
}

// The first element that is not `scale` times the sum of both ranks' patterns, or -1.
int64_t first_wrong(const Tensor& t, double scale) {
  const std::vector<double> v = t.to_vector();
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != scale * (3.0 + 2.0 * static_cast<double>(i % 13))) return static_cast<int64_t>(i);
  return -1;
}

TEST(HostCopyGpu, SumsAndAveragesAreExactAcrossChunksAndRings) {
  VITDDP_REQUIRE_GPU();
  if (cuda::visible_device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  auto errors = run_pair(60000ms, [](int rank, ProcessGroupNccl& pg, ProcessGroupNccl& plain) {
    EXPECT_EQ(pg.backend(), "nccl+host-copy");
    // 1 element; a part shorter than a chunk; odd sizes; 80 MB of f32 (10 chunks of 4 MiB per
    // part, through a ring of 4 slots: each slot reused).
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16})
      for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{3 * 1024 * 1024 + 5}, int64_t{20 * 1024 * 1024}})
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
          Tensor t = pattern(rank, n, dtype, pg.device());
          pg.allreduce(t, op)->wait();
          EXPECT_EQ(first_wrong(t, op == ReduceOp::kAvg ? 0.5 : 1.0), -1)
              << dtype_name(dtype) << " n " << n << (op == ReduceOp::kAvg ? " avg" : " sum");
        }
    // Eight queued before any wait, with an NCCL broadcast and all-reduce among them: the comm
    // stream runs them in issue order.
    std::vector<Tensor> queued;
    std::vector<std::shared_ptr<Work>> works;
    Tensor broadcasted = pattern(rank, 4096, DType::kF32, pg.device());
    for (int k = 0; k < 8; ++k) {
      queued.push_back(pattern(rank, 1000003 + k, k % 2 ? DType::kBF16 : DType::kF32, pg.device()));
      works.push_back(pg.allreduce(queued.back(), ReduceOp::kSum));
      if (k == 3) works.push_back(pg.broadcast(broadcasted, 1));
    }
    Tensor by_nccl = pattern(rank, 4096, DType::kF32, pg.device());
    plain.allreduce(by_nccl, ReduceOp::kSum)->wait();
    for (auto& w : works) w->wait();
    for (int k = 0; k < 8; ++k) EXPECT_EQ(first_wrong(queued[k], 1.0), -1) << "queued all-reduce " << k;
    EXPECT_EQ(first_wrong(by_nccl, 1.0), -1);
    const std::vector<double> b = broadcasted.to_vector();
    for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], 2.0 + static_cast<double>(i % 13)) << i;
  });
  EXPECT_EQ(errors, std::vector<std::string>({"", ""}));
}

// Note [Back-to-back host copies] (with --host-copy-overlap and --host-copy-reduce-beside):
// collectives issued one after another may overlap their copies only where that is safe. Slices of one buffer, each written on the caller's stream just before
// its all-reduce (as backward makes DDP's buckets), in up to 3 chunks each: every slice exact.
// The same tensor twice without a wait: the second sums the first's results. An NCCL broadcast
// into a slice right before its host copy: the copy sums what the broadcast wrote.
TEST(HostCopyGpu, BackToBackCollectivesOverlapOnlyWhereSafe) {
  VITDDP_REQUIRE_GPU();
  if (cuda::visible_device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  auto errors = run_pair(60000ms, [](int rank, ProcessGroupNccl& pg, ProcessGroupNccl&) {
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      const int64_t slice = 5 * 1024 * 1024 + 64;  // 10 or 20 MB: 2 or 3 chunks per part
      const int pieces = 8;
      Tensor pristine = pattern(rank, slice * pieces, dtype, pg.device());
      Tensor buffer = Tensor::empty({slice * pieces}, dtype, Device::cuda(pg.device()));
      std::vector<std::shared_ptr<Work>> works;
      for (int k = 0; k < pieces; ++k) {
        Tensor part = buffer.as_strided({slice}, {1}, k * slice);
        part.copy_(pristine.as_strided({slice}, {1}, k * slice));  // on the caller's stream
        works.push_back(pg.allreduce(part, ReduceOp::kSum));
      }
      for (auto& w : works) w->wait();
      EXPECT_EQ(first_wrong(buffer, 1.0), -1) << dtype_name(dtype) << ": slices back to back";
    }
    Tensor twice = pattern(rank, 3 * 1024 * 1024 + 5, DType::kF32, pg.device());
    auto first = pg.allreduce(twice, ReduceOp::kSum);
    pg.allreduce(twice, ReduceOp::kSum)->wait();
    first->wait();
    EXPECT_EQ(first_wrong(twice, 2.0), -1) << "the same tensor twice without a wait";
    // A tensor between them too small for rank 1 to own a part of (it reduces nothing there, so
    // its next all-reduce must not overlap: host_copy::may_overlap).
    Tensor again = pattern(rank, 3 * 1024 * 1024 + 5, DType::kF32, pg.device());
    Tensor tiny = pattern(rank, 40, DType::kF32, pg.device());
    auto a1 = pg.allreduce(again, ReduceOp::kSum);
    auto a2 = pg.allreduce(tiny, ReduceOp::kSum);
    pg.allreduce(again, ReduceOp::kSum)->wait();
    a1->wait();
    a2->wait();
    EXPECT_EQ(first_wrong(again, 2.0), -1) << "the same tensor with a tiny one between";
    EXPECT_EQ(first_wrong(tiny, 1.0), -1);
    Tensor mixed = pattern(rank, 2 * 1024 * 1024, DType::kF32, pg.device());
    Tensor before = pattern(rank, 2 * 1024 * 1024, DType::kF32, pg.device());
    auto a = pg.allreduce(before, ReduceOp::kSum);
    auto b = pg.broadcast(mixed, 1);  // rank 1's pattern, (2 + i mod 13), on both
    pg.allreduce(mixed, ReduceOp::kSum)->wait();
    a->wait();
    b->wait();
    EXPECT_EQ(first_wrong(before, 1.0), -1);
    const std::vector<double> m = mixed.to_vector();
    for (size_t i = 0; i < m.size(); ++i) ASSERT_EQ(m[i], 4.0 + 2.0 * static_cast<double>(i % 13)) << i;
  }, /*pipelined=*/true);
  EXPECT_EQ(errors, std::vector<std::string>({"", ""}));
}

// Plain (the default), and overlapping with the additions beside the copies (Note [Back-to-back
// host copies], Note [Reductions beside the copies]).
TEST(HostCopyGpu, SumsEqualNcclsBitForBit) {
  VITDDP_REQUIRE_GPU();
  if (cuda::visible_device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  for (bool pipelined : {false, true}) {
    SCOPED_TRACE(pipelined ? "overlapping, additions beside the copies" : "plain");
    auto errors = run_pair(60000ms, [](int rank, ProcessGroupNccl& pg, ProcessGroupNccl& plain) {
      std::mt19937 random(1234 + rank);
      std::uniform_real_distribution<double> uniform(-1.0, 1.0);
      std::vector<double> values(5 * 1024 * 1024 + 17);
      for (double& v : values) v = uniform(random) * std::exp(8 * uniform(random));
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        Tensor a = Tensor::from_vector(values, {static_cast<int64_t>(values.size())}, DType::kF32)
                       .to(dtype)
                       .to(Device::cuda(pg.device()));
        Tensor b = a.clone();
        pg.allreduce(a, ReduceOp::kSum)->wait();
        plain.allreduce(b, ReduceOp::kSum)->wait();
        const std::vector<double> x = a.to_vector(), y = b.to_vector();
        int64_t differ = 0;
        for (size_t i = 0; i < x.size(); ++i) differ += x[i] != y[i];
        EXPECT_EQ(differ, 0) << dtype_name(dtype) << ": elements that differ from NCCL's sum";
      }
    }, pipelined);
    EXPECT_EQ(errors, std::vector<std::string>({"", ""}));
  }
}

// Rank 1 never joins: rank 0's copies wait on counters rank 1 never writes. The watchdog must
// time the collective out after 2 s, name it, and release the waits so that the group's
// teardown finishes.
TEST(HostCopyGpu, MissingPeerTimesOutAndTheTeardownFinishes) {
  VITDDP_REQUIRE_GPU();
  if (cuda::visible_device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  ErrorKind kind = ErrorKind::kUser;
  std::string what;
  const auto start = std::chrono::steady_clock::now();
  auto errors = run_pair(2000ms, [&](int rank, ProcessGroupNccl& pg, ProcessGroupNccl&) {
    pg.barrier();  // both transports are connected
    if (rank == 1) return;
    Tensor t = pattern(rank, 4 * 1024 * 1024, DType::kF32, pg.device());
    auto work = pg.allreduce(t, ReduceOp::kSum);
    try {
      while (!work->done()) std::this_thread::sleep_for(10ms);
    } catch (const Error& e) {
      kind = e.kind();
      what = e.what();
    }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);  // the teardowns included
  EXPECT_EQ(kind, ErrorKind::kTimeout) << what;
  EXPECT_NE(what.find("via host copy"), std::string::npos) << what;
  EXPECT_EQ(errors[1], "");
}

// Rank 0 fails (its collective times out while rank 1 stays away); rank 1, alive, must then fail
// too at its next check, naming rank 0's transport, rather than take what rank 0's released
// streams send for a result.
TEST(HostCopyGpu, APeersFailureFailsTheLiveRankToo) {
  VITDDP_REQUIRE_GPU();
  if (cuda::visible_device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  ErrorKind kind = ErrorKind::kUser;
  std::string what;
  auto errors = run_pair(2000ms, [&](int rank, ProcessGroupNccl& pg, ProcessGroupNccl&) {
    pg.barrier();
    if (rank == 0) {
      Tensor t = pattern(rank, 1024 * 1024, DType::kF32, pg.device());
      auto work = pg.allreduce(t, ReduceOp::kSum);
      try {
        while (!work->done()) std::this_thread::sleep_for(10ms);
      } catch (const Error&) {
      }
      return;
    }
    std::this_thread::sleep_for(5s);  // rank 0 has timed out and released its waits by now
    try {
      pg.check_health();
    } catch (const Error& e) {
      kind = e.kind();
      what = e.what();
    }
  });
  EXPECT_EQ(kind, ErrorKind::kPeer) << what;
  EXPECT_NE(what.find("rank 0's host-copy transport failed"), std::string::npos) << what;
  EXPECT_EQ(errors[1], "");
}

#endif

}  // namespace
}  // namespace vitddp
