// The host-copy all-reduce's plan (distributed/host_copy/copy_plan.h), run by a simulator: each
// rank's two streams are two threads, the rings are host buffers, the counters atomics, and
// every wait has a deadline, so a plan that deadlocks fails instead of hanging. The GPU runs the
// same steps (distributed/nccl/host_copy_transport.cpp); here they must give every rank the exact
// sum (small integers) for several worlds, sizes, chunk and ring sizes, across consecutive
// all-reduces (the counters carry over) and across the counters' 32-bit wrap.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distributed/host_copy/copy_plan.h"

namespace vitddp::host_copy {
namespace {

using Kind = CopyStep::Kind;

class Simulator {
 public:
  Simulator(int world, int64_t chunk, int slots, uint32_t counter_start)
      : world_(world), chunk_(chunk), slots_(slots) {
    for (int r = 0; r < world; ++r) {
      counters_.emplace_back(world);
      for (int p = 0; p < world; ++p) counters_[r].sent[p] = counters_[r].received[p] = counter_start;
      staging_.emplace_back(chunk);
      reduced_.push_back(std::make_unique<std::atomic<int64_t>>(0));
    }
    for (int i = 0; i < world * world; ++i) {
      rings_.emplace_back(static_cast<size_t>(slots * chunk));
      ready_.push_back(std::make_unique<std::atomic<uint32_t>>(counter_start));
      consumed_.push_back(std::make_unique<std::atomic<uint32_t>>(counter_start));
    }
  }

  // All-reduces `buffers` (one per rank) in place; false (with `error`) on a deadlock.
  bool allreduce(std::vector<std::vector<float>>& buffers, float scale, std::string& error) {
    std::vector<CopyPlan> plans;
    for (int r = 0; r < world_; ++r) {
      plans.push_back(plan_allreduce(world_, r, static_cast<int64_t>(buffers[r].size()), chunk_, slots_, counters_[r]));
      reduced_[r]->store(0);
    }
    std::atomic<bool> failed{false};
    std::vector<std::string> errors(2 * world_);
    std::vector<std::thread> threads;
    for (int r = 0; r < world_; ++r)
      for (int s = 0; s < 2; ++s)
        threads.emplace_back([&, r, s] {
          const auto& steps = s == 0 ? plans[r].send : plans[r].recv;
          for (const CopyStep& step : steps)
            if (!run(r, step, buffers[r], scale, failed)) {
              errors[2 * r + s] = "rank " + std::to_string(r) + (s == 0 ? " send" : " recv") + " stream stuck";
              failed = true;
              return;
            }
        });
    for (auto& t : threads) t.join();
    for (const auto& e : errors) error += e.empty() ? "" : e + "; ";
    return !failed;
  }

 private:
  std::vector<float>& ring(int from, int to) { return rings_[from * world_ + to]; }
  std::atomic<uint32_t>& ready(int from, int to) { return *ready_[from * world_ + to]; }
  std::atomic<uint32_t>& consumed(int from, int to) { return *consumed_[from * world_ + to]; }

  // CU_STREAM_WAIT_VALUE_GEQ's cyclic comparison, polled until a deadline.
  static bool wait_geq(const std::atomic<uint32_t>& counter, uint32_t value, const std::atomic<bool>& failed) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (static_cast<int32_t>(counter.load(std::memory_order_acquire) - value) < 0) {
      if (failed || std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }

  bool run(int r, const CopyStep& step, std::vector<float>& buffer, float scale, const std::atomic<bool>& failed) {
    switch (step.kind) {
      case Kind::kWaitConsumed: return wait_geq(consumed(r, step.peer), step.value, failed);
      case Kind::kCopyToRing:
        EXPECT_LE(step.count, chunk_);
        std::memcpy(ring(r, step.peer).data() + step.slot * chunk_, buffer.data() + step.offset,
                    step.count * sizeof(float));
        return true;
      case Kind::kSignalReady: ready(r, step.peer).store(step.value, std::memory_order_release); return true;
      case Kind::kWaitReady: return wait_geq(ready(step.peer, r), step.value, failed);
      case Kind::kCopyFromRing: {
        float* to = step.to_staging ? staging_[r].data() : buffer.data() + step.offset;
        std::memcpy(to, ring(step.peer, r).data() + step.slot * chunk_, step.count * sizeof(float));
        return true;
      }
      case Kind::kSignalConsumed: consumed(step.peer, r).store(step.value, std::memory_order_release); return true;
      case Kind::kReduce:
        for (int64_t i = 0; i < step.count; ++i) {
          float& x = buffer[step.offset + i];
          x = (x + staging_[r][i]) * (step.last ? scale : 1.0f);
        }
        return true;
      case Kind::kMarkReduced:
        EXPECT_EQ(reduced_[r]->load(), step.chunk);  // marked in order
        reduced_[r]->store(step.chunk + 1, std::memory_order_release);
        return true;
      case Kind::kWaitReduced: {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (reduced_[r]->load(std::memory_order_acquire) <= step.chunk) {
          if (failed || std::chrono::steady_clock::now() > deadline) return false;
          std::this_thread::yield();
        }
        return true;
      }
    }
    return false;
  }

  int world_;
  int64_t chunk_;
  int slots_;
  std::vector<RingCounters> counters_;
  std::vector<std::vector<float>> staging_;
  std::vector<std::unique_ptr<std::atomic<int64_t>>> reduced_;
  std::vector<std::vector<float>> rings_;
  std::vector<std::unique_ptr<std::atomic<uint32_t>>> ready_, consumed_;
};

// Rank r's element i: (r + 1) + (i mod 7): integers, so every order of additions is exact.
std::vector<std::vector<float>> pattern(int world, int64_t count) {
  std::vector<std::vector<float>> buffers(world, std::vector<float>(count));
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < count; ++i) buffers[r][i] = static_cast<float>(r + 1 + i % 7);
  return buffers;
}

float expected_sum(int world, int64_t i) { return static_cast<float>(world * (world + 1) / 2 + world * (i % 7)); }

struct Case {
  int world;
  int64_t chunk;
  int slots;
};

TEST(HostCopyPlan, EveryRankGetsTheExactSumWithoutDeadlock) {
  for (const Case c : {Case{2, 64, 1}, Case{2, 100, 4}, Case{3, 64, 1}, Case{3, 37, 2}, Case{4, 64, 2}, Case{5, 50, 3},
                       Case{8, 64, 1}}) {
    Simulator sim(c.world, c.chunk, c.slots, 0);
    // Sizes: empty, smaller than the world, parts shorter than a chunk, many chunks per part.
    for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{130}, int64_t{1000}, int64_t{4099}}) {
      auto buffers = pattern(c.world, count);
      std::string error;
      ASSERT_TRUE(sim.allreduce(buffers, 1.0f, error))
          << "world " << c.world << ", chunk " << c.chunk << ", slots " << c.slots << ", count " << count << ": " << error;
      for (int r = 0; r < c.world; ++r)
        for (int64_t i = 0; i < count; ++i)
          ASSERT_EQ(buffers[r][i], expected_sum(c.world, i))
              << "world " << c.world << ", count " << count << ", rank " << r << ", element " << i;
    }
  }
}

TEST(HostCopyPlan, AveragesWithTheScaleAppliedOnceAndSurvivesTheCounterWrap) {
  // Counters 5 uses short of 2^32: the rings' values wrap during the first all-reduce.
  Simulator sim(2, 16, 2, 0xFFFFFFFBu);
  for (int round = 0; round < 3; ++round) {
    auto buffers = pattern(2, 200);
    std::string error;
    ASSERT_TRUE(sim.allreduce(buffers, 0.5f, error)) << error;
    for (int r = 0; r < 2; ++r)
      for (int64_t i = 0; i < 200; ++i) ASSERT_EQ(buffers[r][i], expected_sum(2, i) * 0.5f) << "round " << round;
  }
}

TEST(HostCopyPlan, PartsAreAlignedAndCoverTheBuffer) {
  for (int world : {2, 3, 8})
    for (int64_t count : {int64_t{0}, int64_t{5}, int64_t{1000}, int64_t{306535400}}) {
      int64_t next = 0;
      for (int p = 0; p < world; ++p) {
        const Range part = owner_part(world, p, count, 64);
        EXPECT_EQ(part.begin, next);
        EXPECT_TRUE(part.begin % 64 == 0 || part.begin == count);
        EXPECT_GE(part.size(), 0);
        next = part.end;
      }
      EXPECT_EQ(next, count) << "world " << world;
    }
}

TEST(HostCopyPlan, ChunksNeverExceedTheRingSlotAndEveryRingIsUsedInStep) {
  RingCounters a(2), b(2);
  const CopyPlan p0 = plan_allreduce(2, 0, 1000, 128, 3, a);
  const CopyPlan p1 = plan_allreduce(2, 1, 1000, 128, 3, b);
  // Rank 0 sends rank 1 exactly as many chunks as rank 1 receives from it, and the reverse.
  EXPECT_EQ(a.sent[1], b.received[0]);
  EXPECT_EQ(b.sent[0], a.received[1]);
  EXPECT_GT(a.sent[1], 3u);  // the ring wrapped: slots were reused
  for (const auto* plan : {&p0, &p1})
    for (const auto& steps : {plan->send, plan->recv})
      for (const CopyStep& s : steps) {
        if (s.kind == Kind::kCopyToRing || s.kind == Kind::kCopyFromRing) {
          EXPECT_LE(s.count, 128);
          EXPECT_GT(s.count, 0);
          EXPECT_LT(s.slot, 3);
        }
      }
  EXPECT_THROW(plan_allreduce(1, 0, 10, 4, 2, a), std::exception);
  EXPECT_THROW(plan_allreduce(2, 0, 10, 0, 2, a), std::exception);
}

}  // namespace
}  // namespace vitddp::host_copy
