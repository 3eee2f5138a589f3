#include "distributed/host_copy/copy_plan.h"

#include <algorithm>

#include "framework/core/error.h"

namespace vitddp::host_copy {
namespace {

using Kind = CopyStep::Kind;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

Range chunk_of(const Range& part, int64_t chunk, int64_t chunk_elements) {
  const int64_t begin = std::min(part.end, part.begin + chunk * chunk_elements);
  return {begin, std::min(part.end, begin + chunk_elements)};
}

class Planner {
 public:
  Planner(int slots, RingCounters& counters, CopyPlan& plan) : slots_(slots), counters_(counters), plan_(plan) {}

  // Sender side of one chunk on ring (this rank -> peer).
  void send(int peer, const Range& chunk) {
    const uint32_t use = counters_.sent[peer]++;
    const int slot = static_cast<int>(use % static_cast<uint32_t>(slots_));
    // The slot last held chunk `use - slots`: the peer must have copied it out. For the first
    // `slots` uses the value lies behind the counter's start (cyclically) and passes at once;
    // always waiting keeps that true after the counter wraps.
    add(plan_.send, {Kind::kWaitConsumed, peer, use - static_cast<uint32_t>(slots_) + 1});
    CopyStep copy{Kind::kCopyToRing, peer};
    copy.slot = slot;
    copy.offset = chunk.begin;
    copy.count = chunk.size();
    add(plan_.send, copy);
    add(plan_.send, {Kind::kSignalReady, peer, use + 1});
  }

  // Receiver side of one chunk on ring (peer -> this rank).
  void receive(int peer, const Range& chunk, bool to_staging) {
    const uint32_t use = counters_.received[peer]++;
    add(plan_.recv, {Kind::kWaitReady, peer, use + 1});
    CopyStep copy{Kind::kCopyFromRing, peer};
    copy.slot = static_cast<int>(use % static_cast<uint32_t>(slots_));
    copy.offset = chunk.begin;
    copy.count = chunk.size();
    copy.to_staging = to_staging;
    add(plan_.recv, copy);
    add(plan_.recv, {Kind::kSignalConsumed, peer, use + 1});
  }

  static void add(std::vector<CopyStep>& steps, CopyStep step) { steps.push_back(step); }

 private:
  int slots_;
  RingCounters& counters_;
  CopyPlan& plan_;
};

}  // namespace

Range owner_part(int world, int owner, int64_t count, int64_t align) {
  const int64_t part = ceil_div(ceil_div(count, world), align) * align;
  const int64_t begin = std::min(count, owner * part);
  return {begin, std::min(count, begin + part)};
}

CopyPlan plan_allreduce(int world, int rank, int64_t count, int64_t chunk_elements, int slots, RingCounters& counters) {
  VITDDP_CHECK(world >= 2 && rank >= 0 && rank < world && count >= 0 && chunk_elements >= 1 && slots >= 1 &&
                   static_cast<int>(counters.sent.size()) == world && static_cast<int>(counters.received.size()) == world,
               "plan_allreduce: bad arguments (world ", world, ", rank ", rank, ", count ", count, ", chunk ",
               chunk_elements, ", slots ", slots, ")");
  // Parts start on 64-element boundaries: 16-byte aligned chunks for the reduction's vector loads.
  constexpr int64_t kAlign = 64;
  std::vector<Range> parts;
  int64_t chunks = 0;  // chunks of the longest part
  for (int p = 0; p < world; ++p) {
    parts.push_back(owner_part(world, p, count, kAlign));
    chunks = std::max(chunks, ceil_div(parts.back().size(), chunk_elements));
  }
  CopyPlan plan;
  plan.reduced_chunks = ceil_div(parts[rank].size(), chunk_elements);
  Planner planner(slots, counters, plan);
  auto peer = [&](int i) { return (rank + i) % world; };

  // Reduce-scatter, sender side: chunk c of every peer's part, chunk-major.
  for (int64_t c = 0; c < chunks; ++c)
    for (int i = 1; i < world; ++i) {
      const Range chunk = chunk_of(parts[peer(i)], c, chunk_elements);
      if (chunk.size() > 0) planner.send(peer(i), chunk);
    }
  // Reduce-scatter, owner side: each chunk of this rank's part from every peer, added in turn.
  for (int64_t c = 0; c < plan.reduced_chunks; ++c) {
    const Range chunk = chunk_of(parts[rank], c, chunk_elements);
    for (int i = 1; i < world; ++i) {
      planner.receive(peer(i), chunk, /*to_staging=*/true);
      CopyStep reduce{CopyStep::Kind::kReduce};
      reduce.offset = chunk.begin;
      reduce.count = chunk.size();
      reduce.last = i == world - 1;
      Planner::add(plan.recv, reduce);
    }
    CopyStep mark{CopyStep::Kind::kMarkReduced};
    mark.chunk = c;
    Planner::add(plan.recv, mark);
  }
  // All-gather, owner side: each reduced chunk to every peer, once it is reduced.
  for (int64_t c = 0; c < plan.reduced_chunks; ++c) {
    CopyStep wait{CopyStep::Kind::kWaitReduced};
    wait.chunk = c;
    Planner::add(plan.send, wait);
    const Range chunk = chunk_of(parts[rank], c, chunk_elements);
    for (int i = 1; i < world; ++i) planner.send(peer(i), chunk);
  }
  // All-gather, receiver side: every peer's reduced chunks into place, chunk-major.
  for (int64_t c = 0; c < chunks; ++c)
    for (int i = 1; i < world; ++i) {
      const Range chunk = chunk_of(parts[peer(i)], c, chunk_elements);
      if (chunk.size() > 0) planner.receive(peer(i), chunk, /*to_staging=*/false);
    }
  return plan;
}

}  // namespace vitddp::host_copy
