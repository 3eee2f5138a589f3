#include "distributed/bucketing.h"

#include <algorithm>
#include <map>

#include "framework/core/error.h"

namespace vitddp {

// Note [Bucket order]
// Gradients become ready roughly in reverse registration order (the last layer's first), so
// buckets are filled in that order and bucket 0 is the first one ready. The reducer launches
// buckets strictly by index, which keeps the sequence of collectives identical on every rank.
// After the first step the reducer may call this again with the order it actually observed.
//
// Note [The tail buckets]
// Whatever is still queued for the link when backward ends runs exposed: the bucket the first
// layers close, and the one before it if it has not finished; with large buckets, up to a whole
// bucket's all-reduce. Small buckets everywhere shorten it but pay a collective's fixed costs
// many more times. So tail buckets are small only where it matters: the last caps.bytes of
// gradients in ready order (at most one regular bucket's worth) go in buckets of
// caps.tail_bytes, so the link stays busy right up to the end of backward and what is left
// after it is one small bucket. That holds for buckets launched in ready order; with
// ready-order-share < 1 the tail falls in the part launched after backward, where small buckets
// only add collectives.
//
// Note [Early buckets]
// Where the link is slower than backward (P2P off), it can idle only where nothing is queued:
// right after the first bucket, until backward makes the next. With held buckets
// (Note [Launch order] in reducer.cpp) the next one sent is the first after them, so the link
// waits for backward through the held buckets' layers and that bucket's, a share of every step
// that traces show (docs/performance.md). Caps for buckets 1, 2, ... (early_bytes) make those
// few small while the rest keep their size and their few collectives: a held bucket of one
// layer's products and a small bucket after it are ready, and sent, while the first one still
// moves. A small held bucket also shortens the other idle stretch, the next forward's run
// through the held layers once their bytes have arrived.
BucketAssignment compute_bucket_assignment(const std::vector<size_t>& bytes, const std::vector<DType>& dtypes,
                                           const BucketCaps& caps, const std::vector<size_t>& order) {
  VITDDP_CHECK(bytes.size() == dtypes.size(), "compute_bucket_assignment: ", bytes.size(), " sizes but ",
               dtypes.size(), " dtypes");
  const size_t cap_bytes = caps.bytes, first_cap_bytes = caps.first_bytes, tail_cap_bytes = caps.tail_bytes;
  VITDDP_CHECK(cap_bytes > 0 && first_cap_bytes > 0, "bucket caps must be positive");
  for (size_t cap : caps.early_bytes) VITDDP_CHECK(cap > 0, "bucket caps must be positive");
  std::vector<size_t> sequence = order;
  if (sequence.empty()) {
    for (size_t i = bytes.size(); i-- > 0;) sequence.push_back(i);
  }
  VITDDP_CHECK(sequence.size() == bytes.size(), "compute_bucket_assignment: order names ", sequence.size(),
               " parameters, expected ", bytes.size());
  std::vector<bool> seen(bytes.size(), false);
  for (size_t index : sequence) {
    VITDDP_CHECK(index < bytes.size() && !seen[index], "compute_bucket_assignment: bad or repeated index ", index);
    seen[index] = true;
  }
  // The tail: from the first position whose gradients, with all after it, fit in one bucket.
  size_t tail_begin = sequence.size();
  if (tail_cap_bytes > 0) {
    size_t suffix = 0;
    while (tail_begin > 0 && suffix + bytes[sequence[tail_begin - 1]] <= cap_bytes)
      suffix += bytes[sequence[--tail_begin]];
  }

  struct Open {
    std::vector<size_t> indices;
    size_t bytes = 0;
  };
  std::map<DType, Open> open;  // one open bucket per dtype
  BucketAssignment result;
  bool in_tail = false;
  size_t first_tail_bucket = 0;
  auto cap_now = [&] {
    if (result.buckets.empty()) return in_tail ? std::min(first_cap_bytes, tail_cap_bytes) : first_cap_bytes;
    if (in_tail) return tail_cap_bytes;
    const size_t index = result.buckets.size();  // the bucket being filled
    return index <= caps.early_bytes.size() ? caps.early_bytes[index - 1] : cap_bytes;
  };
  auto close_open = [&] {
    for (auto& [dtype, bucket] : open)
      if (!bucket.indices.empty()) result.buckets.push_back(std::move(bucket.indices));
    open.clear();
  };
  for (size_t position = 0; position < sequence.size(); ++position) {
    const size_t index = sequence[position];
    if (position == tail_begin) {
      close_open();  // the tail starts buckets of its own
      in_tail = true;
      first_tail_bucket = result.buckets.size();
    }
    Open& bucket = open[dtypes[index]];
    if (!bucket.indices.empty() && bucket.bytes + bytes[index] > cap_now()) {
      result.buckets.push_back(std::move(bucket.indices));
      bucket = Open{};
    }
    bucket.indices.push_back(index);
    bucket.bytes += bytes[index];
    if (bucket.bytes >= cap_now()) {
      result.buckets.push_back(std::move(bucket.indices));
      bucket = Open{};
    }
  }
  close_open();
  if (in_tail) result.tail_buckets = result.buckets.size() - first_tail_bucket;
  return result;
}

}  // namespace vitddp
