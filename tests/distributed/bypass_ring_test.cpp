// The straggler-aware ring all-reduce (distributed/straggler/bypass_ring.h) between threads:
// exact sums of integer-valued floats (so no order of additions can hide a lost or doubled
// contribution) on 2 to 8 ranks, for every slow rank, with delays below and well above the
// wait, with the bypass and without; two slow ranks; random delays at every reduce; chunks of
// every size, empty ones included. Every message sent is received and no receive is left
// posted. The bypass is taken when a rank is late by more than the wait, and not otherwise.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "common/memory_ring.h"
#include "distributed/straggler/bypass_ring.h"

namespace vitddp {
namespace {

using straggler::BypassOptions;
using straggler::RingStats;

float value(int rank, size_t i) { return static_cast<float>((rank + 1) * 1000 + static_cast<int>(i % 997)); }

struct Outcome {
  std::vector<std::vector<float>> data;
  std::vector<RingStats> stats;
  size_t undelivered = 0, unmatched = 0;
};

Outcome run_ring(int n, size_t count, const std::vector<double>& delays, const BypassOptions& options,
                 uint64_t jitter_seed = 0) {
  testing::MemoryRingWorld world(n);
  for (int r = 0; r < n; ++r) world.set_reduce_delay(r, delays[static_cast<size_t>(r)]);
  Outcome out;
  out.data.assign(static_cast<size_t>(n), std::vector<float>(count));
  out.stats.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) out.data[static_cast<size_t>(r)][i] = value(r, i);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        if (jitter_seed) {  // a different start per rank
          std::mt19937_64 gen(jitter_seed * 131 + static_cast<uint64_t>(r));
          std::this_thread::sleep_for(std::chrono::microseconds(gen() % 3000));
        }
        out.stats[static_cast<size_t>(r)] =
            straggler::ring_allreduce(world.transport(r), out.data[static_cast<size_t>(r)].data(), count, options);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
  out.undelivered = world.undelivered();
  out.unmatched = world.unmatched();
  return out;
}

::testing::AssertionResult exact(const Outcome& o, int n, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += value(r, i);
    for (int r = 0; r < n; ++r)
      if (o.data[static_cast<size_t>(r)][i] != want)
        return ::testing::AssertionFailure() << "rank " << r << " element " << i << ": "
                                             << o.data[static_cast<size_t>(r)][i] << ", want " << want;
  }
  if (o.undelivered || o.unmatched)
    return ::testing::AssertionFailure() << o.undelivered << " messages never received, " << o.unmatched
                                         << " receives left posted";
  return ::testing::AssertionSuccess();
}

int total(const Outcome& o, int RingStats::*field) {
  int t = 0;
  for (const RingStats& s : o.stats) t += s.*field;
  return t;
}

constexpr double kWait = 0.002;

TEST(BypassRing, ExactForEverySlowRankAndDelayOnTwoToEightRanks) {
  for (int n = 2; n <= 8; ++n)
    for (int slow = 0; slow < n; ++slow)
      for (double delay : {0.0, 0.0005, 0.012}) {
        std::vector<double> delays(static_cast<size_t>(n), 0.0);
        delays[static_cast<size_t>(slow)] = delay;
        const size_t count = 37 + static_cast<size_t>(n);
        for (bool bypass : {true, false}) {
          const Outcome o = run_ring(n, count, delays, {bypass, kWait});
          EXPECT_TRUE(exact(o, n, count)) << n << " ranks, slow " << slow << " by " << delay << " s, bypass " << bypass;
          if (!bypass) EXPECT_EQ(total(o, &RingStats::skips), 0);
          // Late by six waits: its successor moves on at least once. A slow rank's first late
          // piece is its second, which on three ranks its successor owns (and the owner waits).
          if (bypass && n >= 4 && delay > 5 * kWait)
            EXPECT_GT(total(o, &RingStats::skips), 0) << n << " ranks, slow " << slow;
        }
      }
}

TEST(BypassRing, NobodyIsSkippedWithoutAStraggler) {
  for (int n : {3, 5, 8}) {
    const Outcome o = run_ring(n, 64, std::vector<double>(static_cast<size_t>(n), 0.0), {true, 0.5});
    EXPECT_TRUE(exact(o, n, 64));
    EXPECT_EQ(total(o, &RingStats::skips), 0);
    EXPECT_EQ(total(o, &RingStats::redirects), 0);
    EXPECT_EQ(total(o, &RingStats::forwarded), 0);
  }
}

TEST(BypassRing, TwoSlowRanksAdjacentOrApart) {
  for (int n = 4; n <= 8; ++n)
    for (int second : {1, 2, n / 2}) {
      std::vector<double> delays(static_cast<size_t>(n), 0.0);
      delays[0] = 0.01;
      delays[static_cast<size_t>(second)] = 0.01;
      const Outcome o = run_ring(n, 50, delays, {true, kWait});
      EXPECT_TRUE(exact(o, n, 50)) << n << " ranks, slow 0 and " << second;
      EXPECT_GT(total(o, &RingStats::skips), 0);
    }
}

// 70 ranks: the pieces' rank sets span two 64-bit words, and prefixes wrap around the ring.
TEST(BypassRing, SeventyRanksSetsOverTwoWords) {
  const int n = 70;
  std::vector<double> delays(static_cast<size_t>(n), 0.0);
  delays[5] = delays[64] = 0.006;
  const Outcome o = run_ring(n, 3 * n + 11, delays, {true, kWait});
  EXPECT_TRUE(exact(o, n, 3 * n + 11));
  EXPECT_GT(total(o, &RingStats::skips), 0);
}

// Fewer elements than ranks (empty chunks), one element, and none.
TEST(BypassRing, ChunksOfEverySizeIncludingEmpty) {
  for (int n : {3, 6, 8})
    for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{8}, size_t{1001}}) {
      std::vector<double> delays(static_cast<size_t>(n), 0.0);
      delays[1] = 0.01;
      const Outcome o = run_ring(n, count, delays, {true, kWait});
      EXPECT_TRUE(exact(o, n, count)) << n << " ranks, " << count << " elements";
    }
}

// Every rank late at random at every reduce, around the wait, from random starts: the skips,
// redirects and forwards race each other (a skip arriving after the piece went, a late piece
// overtaking a header); the sums stay exact.
TEST(BypassRing, RandomDelaysAtEveryReduceStayExact) {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    const int n = 3 + static_cast<int>(seed % 6);
    std::mt19937_64 gen(seed);
    std::vector<double> delays(static_cast<size_t>(n));
    for (double& d : delays) d = static_cast<double>(gen() % 5) * 0.001;
    const Outcome o = run_ring(n, 200 + seed, delays, {true, kWait}, seed);
    EXPECT_TRUE(exact(o, n, 200 + seed)) << "seed " << seed << ", " << n << " ranks";
  }
}

}  // namespace
}  // namespace vitddp
