// The ring all-reduce with the seed paper's straggler bypass in its reduce-scatter (SEEDS.md,
// document 3): a rank that has waited `wait_seconds` (the paper's alpha*T + T_trans) for its
// predecessor's piece moves on without it, and the late piece goes past it to the next rank,
// which adds both. Generalised to any ring size, to several slow ranks and to chunks of any
// size; the all-gather is the plain ring's. Written once over RingTransport (ring_transport.h).
// The sums are exact whatever is late: every rank's contribution to every chunk reaches the
// chunk's owner once (Note [The bypass protocol] in bypass_ring.cpp).
#pragma once

#include <cstddef>
#include <limits>

#include "distributed/straggler/ring_transport.h"

namespace vitddp::straggler {

struct BypassOptions {
  // false: the plain ring (every rank waits for its predecessor, however late).
  bool bypass = true;
  // How long a rank waits for its predecessor's piece before it moves on.
  double wait_seconds = std::numeric_limits<double>::infinity();
};

struct RingStats {
  int skips = 0;        // pieces this rank moved on without (its predecessor was late)
  int redirects = 0;    // pieces this rank sent past a successor that had moved on
  int forwarded = 0;    // late pieces this rank passed on unreduced
  double reduce_scatter_done = 0;  // transport clock: this rank's own chunk complete
  double all_gather_done = 0;      // transport clock: every chunk in place
};

// Sums `data` (count floats, the same count on every rank) over the ring in place. Chunk c of
// the n chunks (count split as evenly as possible, the first count % n one longer) ends its
// reduce-scatter at rank c - 1.
RingStats ring_allreduce(RingTransport& transport, float* data, size_t count, const BypassOptions& options);

}  // namespace vitddp::straggler
