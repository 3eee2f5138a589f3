// The plan of a host-staged all-reduce (`transport host-copy`): the steps each rank's two copy
// streams take, pure and CPU-tested; distributed/nccl/host_copy_transport.cpp runs them with the
// GPU's copy engines and stream memory operations (Note [Host-copy all-reduce] there).
//
// Every ordered pair of ranks (from -> to) shares a ring of `slots` chunk-sized slots in pinned
// shared host memory. Each slot has two flags: `full` (written by `from` once it has copied a
// chunk in) and `free` (written by `to` once it has copied it out). A flag holds one bit of two:
// the parity of the slot's use it last marked, so that a wait can tell this use from the last
// one with a fixed value (a CUDA graph replays fixed values; see `pad_rings`). A third bit,
// kReleased, satisfies every wait: a failed rank sets it on the flags it waits on, so that its
// streams drain.
//
// The buffer is cut into one part per rank; rank r owns part r. Reduce-scatter: every rank sends
// each owner its chunks of the owner's part; the owner adds them into its part. All-gather: every
// owner sends its reduced chunks to every other rank, which copies them into place. Chunks go
// chunk-major (chunk c to every peer before chunk c + 1), and the steps are issued in rounds
// (round c: the sends of chunk c, then its receives), so every wait depends only on a peer's step
// of the same or an earlier round: no deadlock, even when the two streams (or any of the rank's
// streams) share one hardware queue and run in issue order.
#pragma once

#include <cstdint>
#include <vector>

namespace vitddp::host_copy {

// Flag values: the bit of the use's parity, and the bit that releases every wait.
constexpr uint32_t kParityBit[2] = {1u, 2u};
constexpr uint32_t kReleased = 4u;
// Every flag's value before the first use: its "last" use had parity 1.
constexpr uint32_t kInitialFlag = kParityBit[1];

struct CopyStep {
  // device -> host; host -> device; the owner's additions (on the receiving stream when planned
  // inline, else beside it: Note [Reductions beside the copies])
  enum class Stream { kSend, kRecv, kReduce };
  enum class Kind {
    kWaitFree,      // ring (this rank -> peer), slot `slot`: its `free` flag & `mask` != 0
    kCopyToRing,    // buffer[offset, offset + count) -> slot `slot` of ring (this rank -> peer)
    kSignalFull,    // ring (this rank -> peer), slot `slot`: `full` = value
    kWaitFull,      // ring (peer -> this rank), slot `slot`: its `full` flag & `mask` != 0
    kCopyFromRing,  // slot `slot` of ring (peer -> this rank) -> buffer[offset...] or, with
                    // `to_staging`, staging chunk `staging`
    kSignalFree,    // ring (peer -> this rank), slot `slot`: `free` = value
    kReduce,        // buffer[offset, offset + count) += staging chunk `staging`; times the scale when `last`
    kMarkReduced,   // chunk `chunk` of this rank's part is reduced
    kWaitReduced,   // wait for kMarkReduced of chunk `chunk` (issued earlier, on another stream)
    // The staging chunks' hand-over between the receiving and the reducing stream (events; a
    // wait is for the mark of the same staging chunk issued last before it):
    kMarkStaged,       // staging chunk `staging` holds a received chunk
    kWaitStaged,       // wait for it
    kMarkStagingFree,  // staging chunk `staging` was added in: it may be overwritten
    kWaitStagingFree,  // wait for it
  };
  Stream stream;
  Kind kind;
  int peer = -1;
  int slot = -1;
  uint32_t value = 0;  // signals: the flag's new value
  uint32_t mask = 0;   // waits: the bits any of which ends the wait
  int64_t offset = 0;  // elements
  int64_t count = 0;   // elements
  bool to_staging = false;
  int staging = 0;  // which staging chunk (0 .. kStagingChunks - 1)
  bool last = false;
  int64_t chunk = -1;
};

// Staging chunks a rank's receives alternate between when its reductions run beside them.
constexpr int kStagingChunks = 2;

// The uses of each ring since the group began, per peer (its own entry unused). Both ends of a
// ring count the same uses, so they agree on every slot and parity without talking.
struct RingCounters {
  explicit RingCounters(int world) : sent(world, 0), received(world, 0) {}
  std::vector<uint64_t> sent;
  std::vector<uint64_t> received;
};

struct CopyPlan {
  std::vector<CopyStep> steps;  // in issue order (each on its stream)
  int64_t reduced_chunks = 0;   // chunks of this rank's part (kMarkReduced ids are 0 .. this - 1)
};

// Part `owner` of a buffer of `count` elements cut among `world` ranks: [begin, end). Parts are
// `ceil(count / world)` rounded up to a multiple of `align` elements; the last ones may be
// shorter or empty.
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};
Range owner_part(int world, int owner, int64_t count, int64_t align);

// The steps of rank `rank` for one all-reduce of `count` elements in chunks of at most
// `chunk_elements`, over rings of `slots` slots, advancing `counters`. Every rank must plan the
// same all-reduces in the same order. `reduce_beside`: the additions run on a stream of their own,
// from alternating staging chunks (Note [Reductions beside the copies]); else on the receiving
// stream, from staging chunk 0. The runner must then also make the receiving stream wait, before
// the plan, for the reducing stream's earlier work (the staging chunks' last uses). Throws
// (internal error) on arguments out of range.
CopyPlan plan_allreduce(int world, int rank, int64_t count, int64_t chunk_elements, int slots, RingCounters& counters,
                        bool reduce_beside = true);

// Note [Back-to-back host copies] (distributed/nccl/host_copy_transport.cpp): whether an
// all-reduce of the bytes [begin, end) may start after its inputs alone, overlapping the last
// collective, which covered [last.begin, last.end): only when the two are apart and this rank
// reduced chunks of the last one (its sends waited for them, so everything older has finished).
// `last` of flag-only padding, or before any collective: reduced false.
struct LastCollective {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  bool reduced = false;
};
bool may_overlap(const LastCollective& last, uintptr_t begin, uintptr_t end);

// Flag-only uses (no data) that bring every ring's use count to a multiple of 2 * slots, where
// every slot's flags are back at the parities they had at the group's start. A CUDA graph
// captured from that state and ending in it can be replayed any number of times; eager
// all-reduces between replays are followed by this before the next one. Empty when aligned.
CopyPlan pad_rings(int world, int rank, int slots, RingCounters& counters);
bool rings_aligned(int slots, const RingCounters& counters);

}  // namespace vitddp::host_copy
