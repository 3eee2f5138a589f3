#include "distributed/host_copy/copy_plan.h"

#include <algorithm>

#include "framework/core/error.h"

namespace vitddp::host_copy {
namespace {

using Kind = CopyStep::Kind;
using Stream = CopyStep::Stream;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

Range chunk_of(const Range& part, int64_t chunk, int64_t chunk_elements) {
  const int64_t begin = std::min(part.end, part.begin + chunk * chunk_elements);
  return {begin, std::min(part.end, begin + chunk_elements)};
}

class Planner {
 public:
  Planner(int slots, RingCounters& counters, CopyPlan& plan) : slots_(slots), counters_(counters), plan_(plan) {}

  // Sender side of one use of ring (this rank -> peer); `chunk` empty: a flag-only use.
  void send(int peer, const Range* chunk) {
    const uint64_t use = counters_.sent[peer]++;
    const int slot = static_cast<int>(use % slots_);
    const uint64_t round = use / slots_;  // the slot's own use count
    CopyStep wait = step(Stream::kSend, Kind::kWaitFree, peer, slot);
    wait.mask = kParityBit[(round + 1) & 1] | kReleased;  // the slot's previous use was copied out
    add(wait);
    if (chunk) {
      CopyStep copy = step(Stream::kSend, Kind::kCopyToRing, peer, slot);
      copy.offset = chunk->begin;
      copy.count = chunk->size();
      add(copy);
    }
    CopyStep signal = step(Stream::kSend, Kind::kSignalFull, peer, slot);
    signal.value = kParityBit[round & 1];
    add(signal);
  }

  // Receiver side of one use of ring (peer -> this rank); `chunk` empty: a flag-only use.
  // `staging` >= 0: into that staging chunk; with `beside` (Note [Reductions beside the copies])
  // marked staged after the copy, and with `wait_staging` only once it was marked free.
  void receive(int peer, const Range* chunk, int staging = -1, bool beside = false, bool wait_staging = false) {
    const uint64_t use = counters_.received[peer]++;
    const int slot = static_cast<int>(use % slots_);
    const uint64_t round = use / slots_;
    CopyStep wait = step(Stream::kRecv, Kind::kWaitFull, peer, slot);
    wait.mask = kParityBit[round & 1] | kReleased;
    add(wait);
    if (chunk) {
      if (wait_staging) add(staging_step(Stream::kRecv, Kind::kWaitStagingFree, staging));
      CopyStep copy = step(Stream::kRecv, Kind::kCopyFromRing, peer, slot);
      copy.offset = chunk->begin;
      copy.count = chunk->size();
      copy.to_staging = staging >= 0;
      copy.staging = std::max(staging, 0);
      add(copy);
      if (beside) add(staging_step(Stream::kRecv, Kind::kMarkStaged, staging));
    }
    CopyStep signal = step(Stream::kRecv, Kind::kSignalFree, peer, slot);
    signal.value = kParityBit[round & 1];
    add(signal);
  }

  static CopyStep step(Stream stream, Kind kind, int peer = -1, int slot = -1) {
    CopyStep s{stream, kind};
    s.peer = peer;
    s.slot = slot;
    return s;
  }
  static CopyStep staging_step(Stream stream, Kind kind, int staging) {
    CopyStep s{stream, kind};
    s.staging = staging;
    return s;
  }
  void add(const CopyStep& s) { plan_.steps.push_back(s); }

 private:
  int slots_;
  RingCounters& counters_;
  CopyPlan& plan_;
};

void check_counters(int world, int rank, int slots, const RingCounters& counters) {
  VITDDP_CHECK(world >= 2 && rank >= 0 && rank < world && slots >= 1 &&
                   static_cast<int>(counters.sent.size()) == world &&
                   static_cast<int>(counters.received.size()) == world,
               "host copy plan: bad arguments (world ", world, ", rank ", rank, ", slots ", slots, ")");
}

}  // namespace

Range owner_part(int world, int owner, int64_t count, int64_t align) {
  const int64_t part = ceil_div(ceil_div(count, world), align) * align;
  const int64_t begin = std::min(count, owner * part);
  return {begin, std::min(count, begin + part)};
}

// Note [Reductions beside the copies]
// Decision (expert key host-copy-reduce-beside, off until measured on two GPUs): the owner's
// additions of received chunks into its part (kReduce, a short kernel) run on a stream of their
// own, reading alternating staging chunks: the receiving stream copies chunk j into staging chunk
// j mod 2 and marks it staged; the reducing stream waits, adds it in and marks it free; the copy
// of chunk j + 2 waits for that mark. Reason: on the receiving stream each chunk's next copy
// waits for the kernel's launch, its run and the front end's turn back, while the copy engine
// idles; beside it, chunk j's addition runs while chunk j + 1 is copied. Invariants: every wait
// is for a mark issued earlier, so the plan runs in issue order on one queue too; the
// all-gather's sends still wait for the chunks' reductions (kMarkReduced, on the reducing stream);
// before a plan reuses the staging chunks, the runner makes the receiving stream wait for the
// reducing stream's earlier work.
CopyPlan plan_allreduce(int world, int rank, int64_t count, int64_t chunk_elements, int slots, RingCounters& counters,
                        bool reduce_beside) {
  check_counters(world, rank, slots, counters);
  VITDDP_CHECK(count >= 0 && chunk_elements >= 1, "plan_allreduce: count ", count, ", chunk ", chunk_elements);
  // Parts start on 64-element boundaries: 16-byte aligned chunks for the reduction's vector loads.
  constexpr int64_t kAlign = 64;
  std::vector<Range> parts;
  int64_t rounds = 0;  // chunks of the longest part
  for (int p = 0; p < world; ++p) {
    parts.push_back(owner_part(world, p, count, kAlign));
    rounds = std::max(rounds, ceil_div(parts.back().size(), chunk_elements));
  }
  CopyPlan plan;
  plan.reduced_chunks = ceil_div(parts[rank].size(), chunk_elements);
  Planner planner(slots, counters, plan);
  auto peer = [&](int i) { return (rank + i) % world; };

  // Reduce-scatter, round c: chunk c of every peer's part goes out; chunk c of this rank's part
  // comes in from every peer and is added in turn.
  const Stream reducing = reduce_beside ? Stream::kReduce : Stream::kRecv;
  int64_t staged = 0;  // receives into staging so far
  for (int64_t c = 0; c < rounds; ++c) {
    for (int i = 1; i < world; ++i) {
      const Range chunk = chunk_of(parts[peer(i)], c, chunk_elements);
      if (chunk.size() > 0) planner.send(peer(i), &chunk);
    }
    if (c >= plan.reduced_chunks) continue;
    const Range mine = chunk_of(parts[rank], c, chunk_elements);
    for (int i = 1; i < world; ++i) {
      const int staging = reduce_beside ? static_cast<int>(staged % kStagingChunks) : 0;
      if (reduce_beside) {
        planner.receive(peer(i), &mine, staging, /*beside=*/true, /*wait_staging=*/staged >= kStagingChunks);
        planner.add(Planner::staging_step(reducing, Kind::kWaitStaged, staging));
      } else {
        planner.receive(peer(i), &mine, staging);
      }
      ++staged;
      CopyStep reduce = Planner::staging_step(reducing, Kind::kReduce, staging);
      reduce.offset = mine.begin;
      reduce.count = mine.size();
      reduce.last = i == world - 1;
      planner.add(reduce);
      if (reduce_beside) planner.add(Planner::staging_step(reducing, Kind::kMarkStagingFree, staging));
    }
    CopyStep mark = Planner::step(reducing, Kind::kMarkReduced);
    mark.chunk = c;
    planner.add(mark);
  }
  // All-gather, round c: this rank's reduced chunk c to every peer; every peer's chunk c into place.
  for (int64_t c = 0; c < rounds; ++c) {
    if (c < plan.reduced_chunks) {
      CopyStep wait = Planner::step(CopyStep::Stream::kSend, Kind::kWaitReduced);
      wait.chunk = c;
      planner.add(wait);
      const Range mine = chunk_of(parts[rank], c, chunk_elements);
      for (int i = 1; i < world; ++i) planner.send(peer(i), &mine);
    }
    for (int i = 1; i < world; ++i) {
      const Range chunk = chunk_of(parts[peer(i)], c, chunk_elements);
      if (chunk.size() > 0) planner.receive(peer(i), &chunk);
    }
  }
  return plan;
}

bool may_overlap(const LastCollective& last, uintptr_t begin, uintptr_t end) {
  const bool apart = end <= last.begin || last.end <= begin;
  return last.reduced && apart;
}

bool rings_aligned(int slots, const RingCounters& counters) {
  const uint64_t period = 2 * static_cast<uint64_t>(slots);
  for (size_t q = 0; q < counters.sent.size(); ++q)
    if (counters.sent[q] % period != 0 || counters.received[q] % period != 0) return false;
  return true;
}

CopyPlan pad_rings(int world, int rank, int slots, RingCounters& counters) {
  check_counters(world, rank, slots, counters);
  const uint64_t period = 2 * static_cast<uint64_t>(slots);
  CopyPlan plan;
  Planner planner(slots, counters, plan);
  // Round j: the j-th padding use of every ring out, then of every ring in (as the all-reduce's
  // rounds: each wait depends on a peer's step of the same or an earlier round).
  for (uint64_t j = 0; j < period; ++j)
    for (int i = 1; i < world; ++i) {
      const int q = (rank + i) % world;
      if (counters.sent[q] % period != 0) planner.send(q, nullptr);
      const int from = (rank + world - i) % world;
      if (counters.received[from] % period != 0) planner.receive(from, nullptr);
    }
  return plan;
}

}  // namespace vitddp::host_copy
