// Which elements of a bucket each rank owns under sharded updates (Note [Sharded updates] in
// distributed/update/sharded.cpp): equal parts for a reduce-scatter and an all-gather, plus a
// remainder of fewer than `world` elements that every rank reduces and updates.
#pragma once

#include <cstdint>

namespace vitddp {

struct BucketShard {
  int64_t numel = 0;       // the bucket's elements
  int64_t part = 0;        // each rank's: [rank * part, (rank + 1) * part)
  int64_t rest_begin = 0;  // [rest_begin, numel): all-reduced and updated by every rank (world * part)
  int64_t own_begin(int rank) const { return rank * part; }
  bool has_rest() const { return rest_begin < numel; }
};

// Throws vitddp::Error unless numel >= 0 and world >= 1.
BucketShard bucket_shard(int64_t numel, int world);

}  // namespace vitddp
