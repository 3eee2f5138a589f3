// The plan of a host-staged all-reduce (--host-copy-allreduce): the steps each rank's two copy
// streams take, pure and CPU-tested; distributed/nccl/host_copy_transport.cpp runs them with the
// GPU's copy engines and stream memory operations (Note [Host-copy all-reduce] there).
//
// Every ordered pair of ranks (from -> to) shares a ring of `slots` chunk-sized slots in pinned
// shared host memory, with two counters: `ready` (chunks `from` has written into the ring) and
// `consumed` (chunks `to` has copied out). The buffer is cut into one part per rank; rank r owns
// part r. Reduce-scatter: every rank sends each owner its chunks of the owner's part; the owner
// adds them into its part. All-gather: every owner sends its reduced chunks to every other rank,
// which copies them into place. A sender waits for its slot to be consumed before writing it;
// a receiver waits for its chunk to be ready before reading it. Chunks go out chunk-major (chunk
// c to every peer before chunk c + 1), so no ring waits on a rank that waits on it in turn.
#pragma once

#include <cstdint>
#include <vector>

namespace vitddp::host_copy {

// One step of one stream. Counter values are 32-bit and compared cyclically (CUDA's
// CU_STREAM_WAIT_VALUE_GEQ: (int32_t)(counter - value) >= 0), so they may wrap.
struct CopyStep {
  enum class Kind {
    kWaitConsumed,    // the counter `consumed` of ring (this rank -> peer) reaches `value`
    kCopyToRing,      // buffer[offset, offset + count) -> slot `slot` of ring (this rank -> peer)
    kSignalReady,     // ring (this rank -> peer): `ready` = value
    kWaitReady,       // ring (peer -> this rank): `ready` reaches `value`
    kCopyFromRing,    // slot `slot` of ring (peer -> this rank) -> buffer[offset...] or, with
                      // `to_staging`, the staging chunk
    kSignalConsumed,  // ring (peer -> this rank): `consumed` = value
    kReduce,          // buffer[offset, offset + count) += staging; times the scale when `last`
    kMarkReduced,     // chunk `chunk` of this rank's part is reduced
    kWaitReduced,     // wait for kMarkReduced of chunk `chunk` (on the other stream; CUDA's
                      // executor must issue that mark first: an event wait sees the latest record)
  };
  Kind kind;
  int peer = -1;
  uint32_t value = 0;
  int slot = -1;
  int64_t offset = 0;  // elements
  int64_t count = 0;   // elements
  bool to_staging = false;
  bool last = false;
  int64_t chunk = -1;
};

// The counters a rank keeps for its rings, one entry per rank (its own unused): chunks sent to
// and received from each peer since the group began. Both ends of a ring count the same chunks,
// so they agree on every value without talking.
struct RingCounters {
  explicit RingCounters(int world) : sent(world, 0), received(world, 0) {}
  std::vector<uint32_t> sent;
  std::vector<uint32_t> received;
};

struct CopyPlan {
  std::vector<CopyStep> send;  // device -> host stream
  std::vector<CopyStep> recv;  // host -> device stream (with the reductions)
  int64_t reduced_chunks = 0;  // chunks of this rank's part (kMarkReduced ids are 0 .. this - 1)
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
// same all-reduces in the same order. Throws (internal error) on arguments out of range.
CopyPlan plan_allreduce(int world, int rank, int64_t count, int64_t chunk_elements, int slots, RingCounters& counters);

}  // namespace vitddp::host_copy
