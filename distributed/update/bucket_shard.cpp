#include "distributed/update/bucket_shard.h"

#include "framework/core/error.h"

namespace vitddp {

BucketShard bucket_shard(int64_t numel, int world) {
  VITDDP_CHECK(numel >= 0 && world >= 1, "bucket_shard: ", numel, " elements over ", world, " ranks");
  BucketShard s;
  s.numel = numel;
  s.part = numel / world;
  s.rest_begin = s.part * world;
  return s;
}

}  // namespace vitddp
