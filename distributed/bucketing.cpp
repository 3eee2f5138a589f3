#include "distributed/bucketing.h"

#include <map>

#include "framework/core/error.h"

namespace vitddp {

// Note [Bucket order]
// Gradients become ready roughly in reverse registration order (the last layer's first), so
// buckets are filled in that order and bucket 0 is the first one ready. The reducer launches
// buckets strictly by index, which keeps the sequence of collectives identical on every rank.
// After the first step the reducer may call this again with the order it actually observed.
BucketAssignment compute_bucket_assignment(const std::vector<size_t>& bytes, const std::vector<DType>& dtypes,
                                           size_t cap_bytes, size_t first_cap_bytes,
                                           const std::vector<size_t>& order) {
  VITDDP_CHECK(bytes.size() == dtypes.size(), "compute_bucket_assignment: ", bytes.size(), " sizes but ",
               dtypes.size(), " dtypes");
  VITDDP_CHECK(cap_bytes > 0 && first_cap_bytes > 0, "bucket caps must be positive");
  std::vector<size_t> sequence = order;
  if (sequence.empty()) {
    for (size_t i = bytes.size(); i-- > 0;) sequence.push_back(i);
  }
  VITDDP_CHECK(sequence.size() == bytes.size(), "compute_bucket_assignment: order names ", sequence.size(),
               " parameters, expected ", bytes.size());
  std::vector<bool> seen(bytes.size(), false);

  struct Open {
    std::vector<size_t> indices;
    size_t bytes = 0;
  };
  std::map<DType, Open> open;  // one open bucket per dtype
  BucketAssignment result;
  auto cap_now = [&] { return result.buckets.empty() ? first_cap_bytes : cap_bytes; };
  for (size_t index : sequence) {
    VITDDP_CHECK(index < bytes.size() && !seen[index], "compute_bucket_assignment: bad or repeated index ", index);
    seen[index] = true;
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
  for (auto& [dtype, bucket] : open)
    if (!bucket.indices.empty()) result.buckets.push_back(std::move(bucket.indices));
  return result;
}

}  // namespace vitddp
