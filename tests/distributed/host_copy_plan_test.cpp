// The host-copy all-reduce's plan (distributed/host_copy/copy_plan.h), run by a simulator: each
// rank's streams (send, receive, and with the reductions beside the copies a reducing one) are
// threads (or one, in issue order, as streams sharing one hardware queue), the rings are host
// buffers, the flags atomics, an event wait binds to the mark issued last before it, and every
// wait has a deadline, so a plan that deadlocks fails instead of hanging. The GPU runs the same steps
// (distributed/nccl/host_copy_transport.cpp); here they must give every rank the exact sum (small
// integers) for several worlds, sizes, chunk and ring sizes, across consecutive all-reduces (also
// back to back, without a join between them), and when padded plans are replayed with fixed flag
// values, as a CUDA graph replays them.
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
  // `serial`: each rank runs its steps in issue order on one thread, as streams sharing one
  // hardware queue would; otherwise each rank's streams are threads. `reduce_beside`: plans with
  // the reductions on a stream of their own (Note [Reductions beside the copies]).
  Simulator(int world, int64_t chunk, int slots, bool serial = false, bool reduce_beside = true)
      : world_(world), chunk_(chunk), slots_(slots), serial_(serial), reduce_beside_(reduce_beside) {
    for (int r = 0; r < world; ++r) {
      counters_.emplace_back(world);
      staging_.emplace_back(kStagingChunks, std::vector<float>(chunk));
      reduced_.emplace_back();
      reduces_done_.push_back(std::make_unique<std::atomic<int64_t>>(0));
      for (int e = 0; e < 2 * kStagingChunks; ++e) marks_.push_back(std::make_unique<std::atomic<int64_t>>(0));
      for (int b = 0; b < kStagingChunks; ++b) staging_states_.push_back(std::make_unique<std::atomic<int>>(0));
    }
    for (int i = 0; i < world * world; ++i) rings_.emplace_back(static_cast<size_t>(slots * chunk));
    for (int i = 0; i < world * world * slots; ++i) {
      full_.push_back(std::make_unique<std::atomic<uint32_t>>(kInitialFlag));
      free_.push_back(std::make_unique<std::atomic<uint32_t>>(kInitialFlag));
    }
  }

  RingCounters& counters(int rank) { return counters_[rank]; }

  // Plans one all-reduce per rank (advancing the counters).
  std::vector<CopyPlan> plan(int64_t count) {
    std::vector<CopyPlan> plans;
    for (int r = 0; r < world_; ++r)
      plans.push_back(plan_allreduce(world_, r, count, chunk_, slots_, counters_[r], reduce_beside_));
    return plans;
  }
  std::vector<CopyPlan> pad() {
    std::vector<CopyPlan> plans;
    for (int r = 0; r < world_; ++r) plans.push_back(pad_rings(world_, r, slots_, counters_[r]));
    return plans;
  }

  // Runs one plan per rank on `buffers` (one per rank); false (with `error`) on a deadlock.
  bool run(const std::vector<CopyPlan>& plans, std::vector<std::vector<float>>& buffers, float scale,
           std::string& error) {
    std::vector<std::vector<std::vector<float>>*> all = {&buffers};
    return run_back_to_back({plans}, all, scale, error);
  }

  // Runs collectives back to back as the transport issues them without a join between them (Note
  // [Back-to-back host copies]): each of a rank's streams runs its steps of collective q + 1 right
  // after its steps of q, the receiving stream once the reducing stream has finished q (the
  // transport's catch-up event). `plans[q]`: one plan per rank; `buffers[q]`: one buffer per rank.
  bool run_back_to_back(const std::vector<std::vector<CopyPlan>>& plans,
                        std::vector<std::vector<std::vector<float>>*>& buffers, float scale, std::string& error) {
    const size_t collectives = plans.size();
    for (int r = 0; r < world_; ++r) {
      reduced_[r].clear();
      for (size_t q = 0; q < collectives; ++q) reduced_[r].push_back(std::make_unique<std::atomic<int64_t>>(0));
      reduces_done_[r]->store(0);
    }
    for (auto& m : marks_) m->store(0);
    // Each event wait's mark: how many marks of its event were issued before it, in all.
    std::vector<std::vector<std::vector<int64_t>>> binds(collectives, std::vector<std::vector<int64_t>>(world_));
    for (int r = 0; r < world_; ++r) {
      std::vector<int64_t> issued(2 * kStagingChunks, 0);
      for (size_t q = 0; q < collectives; ++q)
        for (const CopyStep& step : plans[q][r].steps) {
          binds[q][r].push_back(0);
          if (step.kind == Kind::kMarkStaged || step.kind == Kind::kMarkStagingFree) ++issued[event(step)];
          if (step.kind == Kind::kWaitStaged || step.kind == Kind::kWaitStagingFree)
            binds[q][r].back() = issued[event(step)];
        }
    }
    std::atomic<bool> failed{false};
    constexpr int kStreams = 3;
    const int receiving = static_cast<int>(CopyStep::Stream::kRecv);
    const int reducing = static_cast<int>(CopyStep::Stream::kReduce);
    std::vector<std::string> errors(kStreams * world_);
    std::vector<std::thread> threads;
    for (int r = 0; r < world_; ++r)
      for (int s = 0; s < (serial_ ? 1 : kStreams); ++s)
        threads.emplace_back([&, r, s] {
          for (size_t q = 0; q < collectives; ++q) {
            if (!serial_ && s == receiving && !wait_count(*reduces_done_[r], static_cast<int64_t>(q), failed)) {
              errors[kStreams * r + s] = "rank " + std::to_string(r) + " stuck; ";
              failed = true;
              return;
            }
            for (size_t k = 0; k < plans[q][r].steps.size(); ++k) {
              const CopyStep& step = plans[q][r].steps[k];
              if (!serial_ && static_cast<int>(step.stream) != s) continue;
              if (!execute(r, q, step, binds[q][r][k], (*buffers[q])[r], scale, failed)) {
                errors[kStreams * r + s] = "rank " + std::to_string(r) + " stuck; ";
                failed = true;
                return;
              }
            }
            if (serial_ || s == reducing) reduces_done_[r]->store(static_cast<int64_t>(q) + 1);
          }
        });
    for (auto& t : threads) t.join();
    for (const auto& e : errors) error += e;
    return !failed;
  }

  bool allreduce(std::vector<std::vector<float>>& buffers, float scale, std::string& error) {
    return run(plan(static_cast<int64_t>(buffers[0].size())), buffers, scale, error);
  }

 private:
  std::vector<float>& ring(int from, int to) { return rings_[from * world_ + to]; }
  std::atomic<uint32_t>& full(int from, int to, int slot) { return *full_[(from * world_ + to) * slots_ + slot]; }
  std::atomic<uint32_t>& free_flag(int from, int to, int slot) {
    return *free_[(from * world_ + to) * slots_ + slot];
  }

  // Until `count` >= `at_least`, polled until a deadline.
  static bool wait_count(const std::atomic<int64_t>& count, int64_t at_least, const std::atomic<bool>& failed) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (count.load(std::memory_order_acquire) < at_least) {
      if (failed || std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }

  // CU_STREAM_WAIT_VALUE_AND: until (flag & mask) != 0, polled until a deadline.
  static bool wait_and(const std::atomic<uint32_t>& flag, uint32_t mask, const std::atomic<bool>& failed) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((flag.load(std::memory_order_acquire) & mask) == 0) {
      if (failed || std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }

  // The event a staging mark or wait is on: staged (0 ..) or free (kStagingChunks ..), per chunk.
  static int event(const CopyStep& step) {
    const bool staged = step.kind == Kind::kMarkStaged || step.kind == Kind::kWaitStaged;
    return (staged ? 0 : kStagingChunks) + step.staging;
  }
  std::atomic<int64_t>& marks(int r, const CopyStep& step) { return *marks_[2 * kStagingChunks * r + event(step)]; }
  // 0: free to be written, 1: holds a chunk not yet added in (with the reductions beside the copies).
  std::atomic<int>& staging_state(int r, int staging) { return *staging_states_[kStagingChunks * r + staging]; }

  // `q`: which of the collectives run together; `bind`: for an event wait, the mark it waits for
  // (0: none issued before it).
  bool execute(int r, size_t q, const CopyStep& step, int64_t bind, std::vector<float>& buffer, float scale,
               const std::atomic<bool>& failed) {
    switch (step.kind) {
      case Kind::kWaitFree: return wait_and(free_flag(r, step.peer, step.slot), step.mask, failed);
      case Kind::kCopyToRing:
        EXPECT_LE(step.count, chunk_);
        std::memcpy(ring(r, step.peer).data() + step.slot * chunk_, buffer.data() + step.offset,
                    step.count * sizeof(float));
        return true;
      case Kind::kSignalFull: full(r, step.peer, step.slot).store(step.value, std::memory_order_release); return true;
      case Kind::kWaitFull: return wait_and(full(step.peer, r, step.slot), step.mask, failed);
      case Kind::kCopyFromRing: {
        // Beside the copies a staging chunk is written only once its last addition is done.
        if (step.to_staging && reduce_beside_ && staging_state(r, step.staging).exchange(1) != 0) {
          ADD_FAILURE() << "rank " << r << " overwrote staging chunk " << step.staging << " before it was added in";
          return false;
        }
        float* to = step.to_staging ? staging_[r][step.staging].data() : buffer.data() + step.offset;
        std::memcpy(to, ring(step.peer, r).data() + step.slot * chunk_, step.count * sizeof(float));
        return true;
      }
      case Kind::kSignalFree:
        free_flag(step.peer, r, step.slot).store(step.value, std::memory_order_release);
        return true;
      case Kind::kReduce:
        if (reduce_beside_ && staging_state(r, step.staging).load() != 1) {
          ADD_FAILURE() << "rank " << r << " added staging chunk " << step.staging << " before it was filled";
          return false;
        }
        for (int64_t i = 0; i < step.count; ++i) {
          float& x = buffer[step.offset + i];
          x = (x + staging_[r][step.staging][i]) * (step.last ? scale : 1.0f);
        }
        return true;
      case Kind::kMarkReduced:
        EXPECT_EQ(reduced_[r][q]->load(), step.chunk);  // marked in order
        reduced_[r][q]->store(step.chunk + 1, std::memory_order_release);
        return true;
      case Kind::kWaitReduced: return wait_count(*reduced_[r][q], step.chunk + 1, failed);
      case Kind::kMarkStaged: marks(r, step).fetch_add(1, std::memory_order_release); return true;
      case Kind::kMarkStagingFree:
        staging_state(r, step.staging).store(0);
        marks(r, step).fetch_add(1, std::memory_order_release);
        return true;
      case Kind::kWaitStaged:
      case Kind::kWaitStagingFree: return wait_count(marks(r, step), bind, failed);
    }
    return false;
  }

  int world_;
  int64_t chunk_;
  int slots_;
  bool serial_;
  bool reduce_beside_;
  std::vector<RingCounters> counters_;
  std::vector<std::vector<std::vector<float>>> staging_;  // per rank, per staging chunk
  std::vector<std::vector<std::unique_ptr<std::atomic<int64_t>>>> reduced_;  // per rank, per collective: chunks marked
  std::vector<std::unique_ptr<std::atomic<int64_t>>> reduces_done_;  // per rank: collectives its reducing stream ended
  std::vector<std::unique_ptr<std::atomic<int64_t>>> marks_;  // per rank, per staging event (event())
  std::vector<std::unique_ptr<std::atomic<int>>> staging_states_;  // per rank, per staging chunk
  std::vector<std::vector<float>> rings_;
  std::vector<std::unique_ptr<std::atomic<uint32_t>>> full_, free_;
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
  for (bool beside : {true, false})
    for (bool serial : {false, true})
      for (const Case c : {Case{2, 64, 1}, Case{2, 100, 4}, Case{3, 64, 1}, Case{3, 37, 2}, Case{4, 64, 2},
                           Case{5, 50, 3}, Case{8, 64, 1}}) {
        SCOPED_TRACE(beside ? "reductions beside the copies" : "reductions on the receiving stream");
        Simulator sim(c.world, c.chunk, c.slots, serial, beside);
        // Sizes: empty, smaller than the world, parts shorter than a chunk, many chunks per part.
        for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{130}, int64_t{1000}, int64_t{4099}}) {
          auto buffers = pattern(c.world, count);
          std::string error;
          ASSERT_TRUE(sim.allreduce(buffers, 1.0f, error))
              << (serial ? "one queue per rank, " : "") << "world " << c.world << ", chunk " << c.chunk << ", slots "
              << c.slots << ", count " << count << ": " << error;
          for (int r = 0; r < c.world; ++r)
            for (int64_t i = 0; i < count; ++i)
              ASSERT_EQ(buffers[r][i], expected_sum(c.world, i))
                  << "world " << c.world << ", count " << count << ", rank " << r << ", element " << i;
        }
      }
}

// Note [Back-to-back host copies]: collectives on apart buffers, each stream running the next one's
// steps right after its own of the last (the receiving stream after the reducing stream's), give
// every rank the exact sums without deadlock, on separate threads and on one queue.
TEST(HostCopyPlan, BackToBackCollectivesNeedNoJoinBetweenThem) {
  for (bool beside : {true, false})
    for (bool serial : {false, true})
      for (const Case c : {Case{2, 64, 2}, Case{2, 100, 4}, Case{3, 37, 2}, Case{4, 64, 1}}) {
        SCOPED_TRACE(::testing::Message() << (beside ? "beside, " : "inline, ") << (serial ? "one queue, " : "")
                                          << "world " << c.world << ", chunk " << c.chunk << ", slots " << c.slots);
        Simulator sim(c.world, c.chunk, c.slots, serial, beside);
        const std::vector<int64_t> counts = {1000, 3, 4099, 0, 700, 130};
        std::vector<std::vector<CopyPlan>> plans;
        std::vector<std::vector<std::vector<float>>> data;
        for (int64_t count : counts) {
          plans.push_back(sim.plan(count));
          data.push_back(pattern(c.world, count));
        }
        std::vector<std::vector<std::vector<float>>*> buffers;
        for (auto& d : data) buffers.push_back(&d);
        std::string error;
        ASSERT_TRUE(sim.run_back_to_back(plans, buffers, 1.0f, error)) << error;
        for (size_t q = 0; q < counts.size(); ++q)
          for (int r = 0; r < c.world; ++r)
            for (int64_t i = 0; i < counts[q]; ++i)
              ASSERT_EQ(data[q][r][i], expected_sum(c.world, i)) << "collective " << q << ", rank " << r << ", " << i;
      }
}

TEST(HostCopyPlan, AveragesWithTheScaleAppliedOnce) {
  Simulator sim(2, 16, 2);
  for (int round = 0; round < 3; ++round) {
    auto buffers = pattern(2, 200);
    std::string error;
    ASSERT_TRUE(sim.allreduce(buffers, 0.5f, error)) << error;
    for (int r = 0; r < 2; ++r)
      for (int64_t i = 0; i < 200; ++i) ASSERT_EQ(buffers[r][i], expected_sum(2, i) * 0.5f) << "round " << round;
  }
}

// What a CUDA graph does: steps planned once (from aligned rings, ending with the padding) and
// run again and again with the same flag values, with eager all-reduces and a padding between.
TEST(HostCopyPlan, PaddedPlansReplayAnyNumberOfTimes) {
  for (const Case c : {Case{2, 64, 4}, Case{3, 50, 2}}) {
    Simulator sim(c.world, c.chunk, c.slots);
    std::string error;
    auto eager = pattern(c.world, 777);
    ASSERT_TRUE(sim.allreduce(eager, 1.0f, error)) << error;  // the eager steps before the capture
    ASSERT_FALSE(rings_aligned(c.slots, sim.counters(0)));
    std::vector<std::vector<float>> none(c.world);
    ASSERT_TRUE(sim.run(sim.pad(), none, 1.0f, error)) << error;
    ASSERT_TRUE(rings_aligned(c.slots, sim.counters(0)));
    // The "capture": two all-reduces and the padding, planned once.
    auto first = sim.plan(1000), second = sim.plan(333), closing = sim.pad();
    ASSERT_TRUE(rings_aligned(c.slots, sim.counters(0)));
    for (int replay = 0; replay < 4; ++replay) {
      auto a = pattern(c.world, 1000), b = pattern(c.world, 333);
      ASSERT_TRUE(sim.run(first, a, 1.0f, error)) << "replay " << replay << ": " << error;
      ASSERT_TRUE(sim.run(second, b, 1.0f, error)) << "replay " << replay << ": " << error;
      ASSERT_TRUE(sim.run(closing, none, 1.0f, error)) << "replay " << replay << ": " << error;
      for (int r = 0; r < c.world; ++r) {
        for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(a[r][i], expected_sum(c.world, i)) << "replay " << replay;
        for (int64_t i = 0; i < 333; ++i) ASSERT_EQ(b[r][i], expected_sum(c.world, i)) << "replay " << replay;
      }
      // Between replays: an eager all-reduce (a loss, a flag), then the padding before the next.
      auto between = pattern(c.world, 70);
      ASSERT_TRUE(sim.allreduce(between, 1.0f, error)) << error;
      ASSERT_TRUE(sim.run(sim.pad(), none, 1.0f, error)) << error;
    }
  }
}

// Note [Reductions beside the copies]: the additions go on their own stream, the receives into
// staging alternate between the chunks, each addition waits for its chunk's mark, and a receive
// overwrites a staging chunk only after the addition two receives back marked it free. Inline,
// nothing goes on a third stream and staging chunk 0 serves every receive.
TEST(HostCopyPlan, ReductionsBesideTheCopiesAlternateStagingChunks) {
  for (bool beside : {true, false}) {
    RingCounters counters(3);
    const CopyPlan plan = plan_allreduce(3, 1, 3000, 128, 2, counters, beside);
    int staged = 0, reduces = 0;
    std::vector<int> marked(kStagingChunks, 0), freed(kStagingChunks, 0);
    for (const CopyStep& s : plan.steps) {
      if (s.kind == Kind::kCopyFromRing && s.to_staging) {
        EXPECT_EQ(s.staging, beside ? staged % kStagingChunks : 0) << staged;
        ++staged;
      }
      if (s.kind == Kind::kReduce) {
        EXPECT_EQ(s.stream, beside ? CopyStep::Stream::kReduce : CopyStep::Stream::kRecv);
        ++reduces;
      }
      if (s.kind == Kind::kMarkReduced)
        EXPECT_EQ(s.stream, beside ? CopyStep::Stream::kReduce : CopyStep::Stream::kRecv);
      if (!beside) EXPECT_NE(s.stream, CopyStep::Stream::kReduce);
      if (s.kind == Kind::kMarkStaged) ++marked[s.staging];
      if (s.kind == Kind::kMarkStagingFree) ++freed[s.staging];
      // Waits for the mark of this staging chunk's current use, or (free) of its last one.
      if (s.kind == Kind::kWaitStaged) EXPECT_EQ(marked[s.staging], freed[s.staging] + 1);
      if (s.kind == Kind::kWaitStagingFree) EXPECT_EQ(marked[s.staging], freed[s.staging]);
    }
    EXPECT_EQ(staged, reduces);
    EXPECT_GT(staged, 2 * kStagingChunks);  // every chunk reused
    int waits_for_free = 0;
    for (const CopyStep& s : plan.steps) waits_for_free += s.kind == Kind::kWaitStagingFree;
    EXPECT_EQ(waits_for_free, beside ? staged - kStagingChunks : 0);  // every reuse waits
    if (!beside) EXPECT_EQ(marked, std::vector<int>(kStagingChunks, 0));
  }
}

// Note [Back-to-back host copies]: the next all-reduce may overlap the last only on other bytes,
// and only after one this rank reduced chunks of (not after padding, an empty part or nothing).
TEST(HostCopyPlan, AnAllReduceOverlapsTheLastOnlyWhereSafe) {
  const LastCollective last{1000, 2000, true};
  EXPECT_TRUE(may_overlap(last, 2000, 3000));  // right after it
  EXPECT_TRUE(may_overlap(last, 0, 1000));     // right before it
  EXPECT_FALSE(may_overlap(last, 1999, 3000));
  EXPECT_FALSE(may_overlap(last, 500, 1001));
  EXPECT_FALSE(may_overlap(last, 1000, 2000));  // the same tensor again
  EXPECT_FALSE(may_overlap(last, 1200, 1300));  // inside it
  EXPECT_FALSE(may_overlap(LastCollective{1000, 2000, false}, 5000, 6000));  // it reduced nothing here
  EXPECT_FALSE(may_overlap(LastCollective{}, 5000, 6000));                   // none yet, or padding
  // A rank whose part of a tiny all-reduce is empty reduces nothing: the next one must not overlap.
  RingCounters counters(2);
  EXPECT_EQ(plan_allreduce(2, 1, 64, 1024, 4, counters).reduced_chunks, 0);
  EXPECT_EQ(plan_allreduce(2, 0, 64, 1024, 4, counters).reduced_chunks, 1);
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

TEST(HostCopyPlan, BothEndsOfARingCountTheSameUsesAndChunksFitTheSlots) {
  RingCounters a(2), b(2);
  const CopyPlan p0 = plan_allreduce(2, 0, 1000, 128, 3, a);
  const CopyPlan p1 = plan_allreduce(2, 1, 1000, 128, 3, b);
  EXPECT_EQ(a.sent[1], b.received[0]);
  EXPECT_EQ(b.sent[0], a.received[1]);
  EXPECT_GT(a.sent[1], 3u);  // the ring wrapped: slots were reused
  for (const auto* plan : {&p0, &p1})
    for (const CopyStep& s : plan->steps)
      if (s.kind == Kind::kCopyToRing || s.kind == Kind::kCopyFromRing) {
        EXPECT_LE(s.count, 128);
        EXPECT_GT(s.count, 0);
        EXPECT_LT(s.slot, 3);
      }
  EXPECT_TRUE(pad_rings(2, 0, 3, a).steps.size() > 0);
  EXPECT_TRUE(pad_rings(2, 0, 3, a).steps.empty());  // aligned now
  EXPECT_THROW(plan_allreduce(1, 0, 10, 4, 2, a), std::exception);
  EXPECT_THROW(plan_allreduce(2, 0, 10, 0, 2, a), std::exception);
}

}  // namespace
}  // namespace vitddp::host_copy
