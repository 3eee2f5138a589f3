// ProcessGroupGloo across real processes over loopback: every test forks its ranks, each builds
// its own group in a fresh rendezvous folder and checks closed-form results (rank r contributes
// (r + 1) * (i + 1) at index i, so the sum is W (W + 1) / 2 * (i + 1)).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/group_options.h"
#include "common/multiprocess.h"
#include "common/test_utils.h"
#include "distributed/process_group.h"

namespace vitddp {
namespace {

using namespace std::chrono_literals;
using testing::run_in_processes;
using testing::TempFolder;

#define REQUIRE_GLOO()                                                  \
  do {                                                                  \
    if (!has_gloo_backend()) GTEST_SKIP() << "this build has no Gloo"; \
  } while (0)

constexpr auto kTestTimeout = 20s;

using testing::group_options;

// Runs `body(rank, group)` on `world` forked ranks and expects every one to return 0.
void run_ranks(int world, const std::function<int(int, ProcessGroup&)>& body,
               std::chrono::milliseconds timeout = 10000ms) {
  TempFolder folder("vitddp_gloo");
  const std::string path = folder.path();
  auto codes = run_in_processes(
      world,
      [&](int rank) {
        auto group = make_gloo_process_group(group_options(rank, world, path, timeout));
        VITDDP_CHILD_CHECK(group->rank() == rank && group->size() == world && group->backend() == "gloo");
        return body(rank, *group);
      },
      kTestTimeout);
  EXPECT_EQ(codes, std::vector<int>(world, 0)) << testing::describe_exit_codes(codes);
}

Tensor rank_fill(int rank, int64_t n, DType dtype) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(rank + 1) * static_cast<double>(i + 1);
  return Tensor::from_vector(v, {n}, dtype);
}

// Index of the first element of `t` that is not `scale * (i + 1)` within rtol, or -1.
int64_t first_mismatch(const Tensor& t, double scale, double rtol) {
  std::vector<double> v = t.to_vector();
  for (size_t i = 0; i < v.size(); ++i) {
    double expected = scale * static_cast<double>(i + 1);
    if (std::fabs(v[i] - expected) > rtol * std::fabs(expected)) return static_cast<int64_t>(i);
  }
  return -1;
}

class GlooWorld : public ::testing::TestWithParam<int> {};

TEST_P(GlooWorld, AllreduceSumAndAvgHaveTheClosedForm) {
  REQUIRE_GLOO();
  const int world = GetParam();
  run_ranks(world, [world](int rank, ProcessGroup& pg) {
    const double sum = world * (world + 1) / 2.0;
    // 300k f32 elements span several of Gloo's 1 MB segments.
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{300000}}) {
      for (DType dtype : {DType::kF32, DType::kF64}) {
        const double rtol = dtype == DType::kF32 ? 1e-6 : 1e-12;
        Tensor t = rank_fill(rank, n, dtype);
        pg.allreduce(t, ReduceOp::kSum)->wait();
        int64_t bad = first_mismatch(t, sum, rtol);
        VITDDP_CHILD_CHECK(bad < 0, "sum ", dtype_name(dtype), "[", n, "] at ", bad);

        Tensor a = rank_fill(rank, n, dtype);
        auto work = pg.allreduce(a, ReduceOp::kAvg);
        work->wait();
        VITDDP_CHILD_CHECK(work->done());
        bad = first_mismatch(a, sum / world, rtol);
        VITDDP_CHILD_CHECK(bad < 0, "avg ", dtype_name(dtype), "[", n, "] at ", bad);
      }
    }
    // 16-bit floats: small integers are exact.
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      Tensor t = rank_fill(rank, 8, dtype);
      pg.allreduce(t, ReduceOp::kSum)->wait();
      VITDDP_CHILD_CHECK(first_mismatch(t, sum, 0) < 0, dtype_name(dtype));
    }
    return 0;
  });
}

TEST_P(GlooWorld, ManyCollectivesInFlightCompleteInIssueOrder) {
  REQUIRE_GLOO();
  const int world = GetParam();
  run_ranks(world, [world](int rank, ProcessGroup& pg) {
    std::vector<Tensor> tensors;
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < 16; ++k) {
      tensors.push_back(rank_fill(rank, 1000 + k, DType::kF32));
      works.push_back(pg.allreduce(tensors.back(), ReduceOp::kSum));
    }
    for (int k = 15; k >= 0; --k) works[k]->wait();  // any wait order
    for (int k = 0; k < 16; ++k) {
      VITDDP_CHILD_CHECK(works[k]->done());
      VITDDP_CHILD_CHECK(first_mismatch(tensors[k], world * (world + 1) / 2.0, 1e-6) < 0, "tensor ", k);
    }
    return 0;
  });
}

TEST_P(GlooWorld, BroadcastFromTheLastRank) {
  REQUIRE_GLOO();
  const int world = GetParam();
  run_ranks(world, [world](int rank, ProcessGroup& pg) {
    const int root = world - 1;
    Tensor t = rank == root ? rank_fill(2, 5000, DType::kF64) : Tensor::full({5000}, -1.0, DType::kF64);
    pg.broadcast(t, root)->wait();
    VITDDP_CHILD_CHECK(first_mismatch(t, 3.0, 0) < 0);
    return 0;
  });
}

TEST_P(GlooWorld, AllgatherStacksEveryRanksTensor) {
  REQUIRE_GLOO();
  const int world = GetParam();
  run_ranks(world, [world](int rank, ProcessGroup& pg) {
    Tensor in = rank_fill(rank, 6, DType::kF32).view_as_shape({2, 3});
    Tensor out = Tensor::zeros({world, 2, 3}, DType::kF32);
    pg.allgather(in, out)->wait();
    std::vector<double> v = out.to_vector();
    for (int r = 0; r < world; ++r)
      for (int i = 0; i < 6; ++i)
        VITDDP_CHILD_CHECK(v[r * 6 + i] == (r + 1.0) * (i + 1.0), "out[", r, "][", i, "] = ", v[r * 6 + i]);
    return 0;
  });
}

// In place (out[rank] is `in`, as sharded updates gather its weights) as well as apart.
TEST_P(GlooWorld, AllgatherInPlaceKeepsEveryRow) {
  REQUIRE_GLOO();
  const int world = GetParam();
  run_ranks(world, [world](int rank, ProcessGroup& pg) {
    Tensor out = Tensor::full({world, 4}, -1.0, DType::kF32);
    Tensor in = out.as_strided({4}, {1}, rank * 4);
    in.copy_(rank_fill(rank, 4, DType::kF32));
    pg.allgather(in, out)->wait();
    std::vector<double> v = out.to_vector();
    for (int r = 0; r < world; ++r)
      for (int i = 0; i < 4; ++i)
        VITDDP_CHILD_CHECK(v[r * 4 + i] == (r + 1.0) * (i + 1.0), "out[", r, "][", i, "] = ", v[r * 4 + i]);
    return 0;
  });
}

// Rank r receives elements [r * n, (r + 1) * n) of the average; in place the rest of `in` keeps
// this rank's own values, apart `in` is left as it was.
TEST_P(GlooWorld, ReduceScatterGivesEachRankItsPart) {
  REQUIRE_GLOO();
  const int world = GetParam();
  run_ranks(world, [world](int rank, ProcessGroup& pg) {
    const double avg = (world + 1) / 2.0;
    const int64_t n = 1000;
    Tensor in = rank_fill(rank, n * world, DType::kF32);
    Tensor out = Tensor::zeros({n}, DType::kF32);
    pg.reduce_scatter(in, out, ReduceOp::kAvg)->wait();
    std::vector<double> got = out.to_vector(), kept = in.to_vector();
    for (int64_t i = 0; i < n; ++i) {
      const double index = static_cast<double>(rank * n + i + 1);
      VITDDP_CHILD_CHECK(std::fabs(got[i] - avg * index) <= 1e-6 * avg * index, "out[", i, "] = ", got[i]);
    }
    for (int64_t i = 0; i < n * world; ++i)
      VITDDP_CHILD_CHECK(kept[i] == (rank + 1.0) * (i + 1.0), "in[", i, "] changed to ", kept[i]);

    Tensor whole = rank_fill(rank, n * world, DType::kF64);
    Tensor own = whole.as_strided({n}, {1}, rank * n);
    pg.reduce_scatter(whole, own, ReduceOp::kSum)->wait();
    std::vector<double> v = whole.to_vector();
    for (int64_t i = 0; i < n * world; ++i) {
      const bool mine = i / n == rank;
      const double expected = (mine ? world * (world + 1) / 2.0 : rank + 1.0) * static_cast<double>(i + 1);
      VITDDP_CHILD_CHECK(v[i] == expected, "in place [", i, "] = ", v[i], ", expected ", expected);
    }
    return 0;
  });
}

// The smallest value over the ranks, exactly, for integers beyond a float's precision.
TEST_P(GlooWorld, AllreduceMinOfInt64) {
  REQUIRE_GLOO();
  const int world = GetParam();
  run_ranks(world, [world](int rank, ProcessGroup& pg) {
    const int64_t big = (int64_t{1} << 53) + 1;
    Tensor t = Tensor::from_vector_i64({big + world - rank, rank == 1 ? int64_t{-5} : int64_t{7}}, {2});
    pg.allreduce(t, ReduceOp::kMin)->wait();
    const int64_t* v = t.data<int64_t>();
    VITDDP_CHILD_CHECK(v[0] == big + 1, "min ", v[0]);
    VITDDP_CHILD_CHECK(v[1] == (world > 1 ? -5 : 7), "min ", v[1]);
    return 0;
  });
}

TEST_P(GlooWorld, BarrierWaitsForEveryRank) {
  REQUIRE_GLOO();
  const int world = GetParam();
  TempFolder marks("vitddp_marks");
  const std::string path = marks.path();
  run_ranks(world, [world, path](int rank, ProcessGroup& pg) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100 * rank));  // the last rank arrives last
    std::ofstream(path + "/arrived_" + std::to_string(rank)) << rank;
    pg.barrier();
    for (int r = 0; r < world; ++r)
      VITDDP_CHILD_CHECK(std::filesystem::exists(path + "/arrived_" + std::to_string(r)), "rank ", r,
                         " had not arrived");
    return 0;
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooWorld, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "World" + std::to_string(info.param);
                         });

TEST(Gloo, BadArgumentsAreUserErrors) {
  REQUIRE_GLOO();
  TempFolder folder;
  auto pg = make_gloo_process_group(group_options(0, 1, folder.path()));
  Tensor t = Tensor::zeros({4, 4});
  EXPECT_TRUE(testing::throws_with([&] { pg->allreduce(t.as_strided({4, 2}, {4, 2}, 0), ReduceOp::kSum); },
                                   {"ProcessGroupGloo::allreduce", "contiguous CPU tensor"}));
  EXPECT_TRUE(testing::throws_with([&] { pg->broadcast(t, 1); }, {"root 1"}));
  EXPECT_TRUE(testing::throws_with([&] { pg->allgather(t, Tensor::zeros({2, 4, 4})); }, {"allgather", "shape"}));
  EXPECT_TRUE(testing::throws_with([&] { pg->reduce_scatter(t, Tensor::zeros({5}), ReduceOp::kSum); },
                                   {"reduce_scatter", "in.numel() / world (1)"}));
  EXPECT_TRUE(testing::throws_with(
      [&] { pg->reduce_scatter(Tensor::zeros({4}, DType::kI64), Tensor::zeros({4}, DType::kI64), ReduceOp::kAvg); },
      {"reduce_scatter", "kAvg needs a floating tensor"}));
  EXPECT_TRUE(testing::throws_with([&] { make_gloo_process_group(group_options(3, 2, folder.path())); },
                                   {"rank 3"}));
}

TEST(ProcessGroup, FactoriesExplainAMissingBackend) {
  if (!has_nccl_backend()) {
    EXPECT_TRUE(testing::throws_with([] { make_nccl_process_group(ProcessGroupOptions{}); }, {"no NCCL"}));
  }
  if (!has_gloo_backend()) {
    EXPECT_TRUE(testing::throws_with([] { make_gloo_process_group(ProcessGroupOptions{}); }, {"no Gloo"}));
  }
}

TEST(Gloo, OneRankWorldIsLocal) {
  REQUIRE_GLOO();
  auto pg = make_gloo_process_group(group_options(0, 1, ""));
  Tensor t = rank_fill(0, 10, DType::kF32);
  pg->allreduce(t, ReduceOp::kAvg)->wait();
  EXPECT_LT(first_mismatch(t, 1.0, 0), 0);
  Tensor out = Tensor::zeros({1, 10});
  pg->allgather(t, out)->wait();
  EXPECT_LT(first_mismatch(out, 1.0, 0), 0);
  pg->barrier();
}

TEST(Gloo, MissingRankTimesOutInRendezvous) {
  REQUIRE_GLOO();
  TempFolder folder;
  const auto start = std::chrono::steady_clock::now();
  try {
    make_gloo_process_group(group_options(0, 2, folder.path(), 500ms));
    FAIL() << "rendezvous with a missing rank did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

// Note [Dead peer tests]
// The last rank joins the group and a first barrier (so every connection is up), then either
// exits at once (like a crash: its sockets close) or hangs. The others must fail with kPeer
// or kTimeout within the 3 s timeout (plus slack), never hang, and their next collective must
// fail at once because the group is broken.
enum class PeerFault { kExits, kHangs };

void expect_fault_is_reported(int world, PeerFault fault) {
  const auto timeout = 3000ms;
  run_ranks(
      world,
      [world, fault](int rank, ProcessGroup& pg) {
        pg.barrier();
        if (rank == world - 1) {
          if (fault == PeerFault::kExits) ::_exit(0);
          std::this_thread::sleep_for(4500ms);  // past the others' 3 s timeout
          ::_exit(0);
        }
        Tensor t = rank_fill(rank, 1000, DType::kF32);
        const auto start = std::chrono::steady_clock::now();
        ErrorKind kind = ErrorKind::kUser;
        std::string what;
        try {
          pg.allreduce(t, ReduceOp::kSum)->wait();
        } catch (const Error& e) {
          kind = e.kind();
          what = e.what();
        }
        const auto elapsed = std::chrono::steady_clock::now() - start;
        VITDDP_CHILD_CHECK(!what.empty(), "allreduce with a ", fault == PeerFault::kExits ? "dead" : "hung",
                           " peer did not fail");
        VITDDP_CHILD_CHECK(kind == ErrorKind::kPeer || kind == ErrorKind::kTimeout, what);
        if (fault == PeerFault::kHangs) {
          VITDDP_CHILD_CHECK(kind == ErrorKind::kTimeout, what);
          // The hung rank is named; the others, waiting too, are not (Note [Naming the late rank]).
          const std::string late = "rank " + std::to_string(world - 1) + " had not reached collective #";
          VITDDP_CHILD_CHECK(what.find(late) != std::string::npos, what);
          for (int r = 0; r + 1 < world; ++r)
            VITDDP_CHILD_CHECK(what.find("rank " + std::to_string(r) + " had not") == std::string::npos, what);
        }
        VITDDP_CHILD_CHECK(elapsed < 5s, "took ",
                           std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count(), " ms: ", what);
        VITDDP_CHILD_CHECK(what.find("allreduce") != std::string::npos, what);
        if (rank == 0) std::fprintf(stderr, "rank 0 saw: %s\n", what.c_str());
        // The group is broken now: the next collective fails at once with the same kind.
        const auto again = std::chrono::steady_clock::now();
        bool threw = false;
        try {
          pg.allreduce(t, ReduceOp::kSum)->wait();
        } catch (const Error& e) {
          threw = e.kind() == kind && std::string(e.what()).find("broken") != std::string::npos;
        }
        VITDDP_CHILD_CHECK(threw, "the second collective did not fail as broken");
        VITDDP_CHILD_CHECK(std::chrono::steady_clock::now() - again < 1s);
        return 0;
      },
      timeout);
}

TEST(Gloo, DeadPeerFailsTheOthersWithinTheTimeout2) {
  REQUIRE_GLOO();
  expect_fault_is_reported(2, PeerFault::kExits);
}

TEST(Gloo, DeadPeerFailsTheOthersWithinTheTimeout4) {
  REQUIRE_GLOO();
  expect_fault_is_reported(4, PeerFault::kExits);
}

TEST(Gloo, HungPeerTimesOutTheOthers) {
  REQUIRE_GLOO();
  expect_fault_is_reported(2, PeerFault::kHangs);
}

TEST(Gloo, HungPeerIsNamedAmongThree) {
  REQUIRE_GLOO();
  expect_fault_is_reported(3, PeerFault::kHangs);
}

}  // namespace
}  // namespace vitddp
