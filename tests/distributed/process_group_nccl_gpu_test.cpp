// ProcessGroupNccl on real GPUs. CUDA cannot be used in a child forked after the parent
// initialised it, so these tests run one rank per thread (one GPU each) inside the test
// process; NCCL supports that. They skip without a GPU (one rank) or without two (two ranks).
#include <gtest/gtest.h>

#include <cmath>
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

Tensor rank_fill(int rank, int64_t n, DType dtype, int device) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = (rank + 1.0) * (i + 1.0);
  return Tensor::from_vector(v, {n}, DType::kF32).to(dtype).to(Device::cuda(device));
}

// Largest |t[i] - scale (i + 1)| relative to scale (i + 1).
double worst_relative(const Tensor& t, double scale) {
  std::vector<double> v = t.to_vector();
  double worst = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    double expected = scale * (i + 1.0);
    worst = std::max(worst, std::fabs(v[i] - expected) / expected);
  }
  return worst;
}

// Runs body(rank, group) on `world` threads, thread r on cuda:r; returns each rank's error text
// ("" when it finished).
std::vector<std::string> run_threads(int world, std::chrono::milliseconds timeout,
                                     const std::function<void(int, ProcessGroupNccl&)>& body) {
  testing::TempFolder folder("vitddp_nccl");
  return testing::run_on_gpu_threads(world, [&](int rank) {
    ProcessGroupNccl group(testing::group_options(rank, world, folder.path(), timeout));
    body(rank, group);
  });
}

void check_collectives(int rank, ProcessGroupNccl& pg) {
  const ProcessGroup::IssueStats before = pg.issue_stats();
  const int world = pg.size();
  const double sum = world * (world + 1) / 2.0;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF64}) {
    const double tol = dtype == DType::kBF16 ? 1e-2 : 1e-6;
    Tensor t = rank_fill(rank, 4096, dtype, pg.device());
    pg.allreduce(t, ReduceOp::kSum)->wait();
    EXPECT_LT(worst_relative(t, sum), tol) << dtype_name(dtype);  // to_vector syncs the current stream
    Tensor a = rank_fill(rank, 4096, dtype, pg.device());
    pg.allreduce(a, ReduceOp::kAvg)->wait();
    EXPECT_LT(worst_relative(a, sum / world), tol) << dtype_name(dtype);
  }
  Tensor b = rank == world - 1 ? rank_fill(2, 1000, DType::kF32, pg.device())
                               : Tensor::full({1000}, -1.0, DType::kF32, Device::cuda(pg.device()));
  pg.broadcast(b, world - 1)->wait();
  EXPECT_EQ(worst_relative(b, 3.0), 0.0);
  Tensor in = rank_fill(rank, 6, DType::kF32, pg.device());
  Tensor out = Tensor::zeros({world, 6}, DType::kF32, Device::cuda(pg.device()));
  pg.allgather(in, out)->wait();
  std::vector<double> v = out.to_vector();
  for (int r = 0; r < world; ++r)
    for (int i = 0; i < 6; ++i) EXPECT_EQ(v[r * 6 + i], (r + 1.0) * (i + 1.0)) << r << "," << i;
  // In place, as sharded updates gather its weights.
  Tensor rows = Tensor::full({world, 6}, -1.0, DType::kF32, Device::cuda(pg.device()));
  rows.as_strided({6}, {1}, rank * 6).copy_(rank_fill(rank, 6, DType::kF32, pg.device()));
  pg.allgather(rows.as_strided({6}, {1}, rank * 6), rows)->wait();
  EXPECT_EQ(rows.to_vector(), v);
  // Reduce-scatter, in place (rank r's part of `whole`): the average of every rank's part r.
  Tensor whole = rank_fill(rank, 512 * world, DType::kBF16, pg.device());
  pg.reduce_scatter(whole, whole.as_strided({512}, {1}, rank * 512), ReduceOp::kAvg)->wait();
  std::vector<double> w = whole.to_vector();
  for (int64_t i = 0; i < 512 * world; ++i) {
    const double own = (rank + 1.0) * (i + 1.0), avg = sum / world * (i + 1.0);
    const double expected = i / 512 == rank ? avg : own;
    EXPECT_LE(std::fabs(w[i] - expected), 1e-2 * expected) << i;
  }
  // The smallest int64 over the ranks (the sharded update's non-finite consensus).
  Tensor least = Tensor::from_vector_i64({int64_t{1} << 60, 100 - rank}, {2}).to(Device::cuda(pg.device()));
  pg.allreduce(least, ReduceOp::kMin)->wait();
  EXPECT_EQ(least.to(Device::cpu()).data<int64_t>()[1], 100 - (world - 1));
  EXPECT_EQ(least.to(Device::cpu()).data<int64_t>()[0], int64_t{1} << 60);
  pg.barrier();
  pg.check_health();
  // Seven all-reduces, a broadcast, two all-gathers, a reduce-scatter and the barrier's
  // all-reduce were issued, each taking some host time.
  const ProcessGroup::IssueStats after = pg.issue_stats();
  EXPECT_EQ(after.collectives - before.collectives, 12);
  EXPECT_GT(after.seconds, before.seconds);
}

TEST(Nccl, OneRankCollectives) {
  VITDDP_REQUIRE_GPU();
  auto errors = run_threads(1, 60000ms, check_collectives);
  EXPECT_EQ(errors[0], "");
}

TEST(Nccl, TwoRanksCollectives) {
  VITDDP_REQUIRE_GPU();
  if (cuda::visible_device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  auto errors = run_threads(2, 60000ms, check_collectives);
  EXPECT_EQ(errors, std::vector<std::string>({"", ""}));
}

// Rank 1 never joins rank 0's all-reduce: the watchdog must abort rank 0's communicator after
// the 2 s timeout, and rank 0's next call must throw kTimeout naming the collective.
TEST(Nccl, MissingPeerTimesOutAndAborts) {
  VITDDP_REQUIRE_GPU();
  if (cuda::visible_device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  ErrorKind kind = ErrorKind::kUser;
  std::string what;
  auto errors = run_threads(2, 2000ms, [&](int rank, ProcessGroupNccl& pg) {
    pg.barrier();  // both communicators are connected
    if (rank == 1) {
      std::this_thread::sleep_for(4s);
      return;
    }
    Tensor t = rank_fill(rank, 1024, DType::kF32, pg.device());
    const auto start = std::chrono::steady_clock::now();
    auto work = pg.allreduce(t, ReduceOp::kSum);
    try {
      while (!work->done()) std::this_thread::sleep_for(10ms);
    } catch (const Error& e) {
      kind = e.kind();
      what = e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 6s);
  });
  EXPECT_EQ(kind, ErrorKind::kTimeout) << what;
  EXPECT_NE(what.find("allreduce"), std::string::npos) << what;
  EXPECT_NE(what.find("#1"), std::string::npos) << what;  // #0 was the barrier
  EXPECT_EQ(errors[1], "");
}

#else

TEST(Nccl, FactoryExplainsAMissingBackend) {
  EXPECT_TRUE(testing::throws_with([] { make_nccl_process_group(ProcessGroupOptions{}); }, {"no NCCL"}));
}

#endif

}  // namespace
}  // namespace vitddp
