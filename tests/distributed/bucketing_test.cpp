// compute_bucket_assignment (Note [Bucket order], Note [The tail buckets], Note [Early buckets]):
// caps, dtypes, the given order, the tail's small buckets and the early buckets' caps.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "distributed/bucketing.h"
#include "framework/core/error.h"

namespace vitddp {
namespace {

using Buckets = std::vector<std::vector<size_t>>;

BucketCaps caps(size_t bytes, size_t first, size_t tail = 0) {
  BucketCaps c;
  c.bytes = bytes;
  c.first_bytes = first;
  c.tail_bytes = tail;
  return c;
}

// Bytes of each bucket, in bucket order.
std::vector<size_t> sizes(const BucketAssignment& a, const std::vector<size_t>& bytes) {
  std::vector<size_t> out;
  for (const auto& bucket : a.buckets) {
    size_t sum = 0;
    for (size_t i : bucket) sum += bytes[i];
    out.push_back(sum);
  }
  return out;
}

TEST(Bucketing, FirstBucketSmallThenCapsInReverseRegistrationOrder) {
  const std::vector<size_t> bytes(10, 10);
  const std::vector<DType> dtypes(10, DType::kF32);
  const BucketAssignment a = compute_bucket_assignment(bytes, dtypes, caps(30, 10));
  EXPECT_EQ(a.buckets, (Buckets{{9}, {8, 7, 6}, {5, 4, 3}, {2, 1, 0}}));
}

TEST(Bucketing, DtypesNeverShareABucketAndALargeParameterGetsItsOwn) {
  const std::vector<size_t> bytes = {10, 10, 100, 10};
  const std::vector<DType> dtypes = {DType::kF32, DType::kBF16, DType::kF32, DType::kF32};
  const BucketAssignment a = compute_bucket_assignment(bytes, dtypes, caps(30, 30));
  // 3, then 2 alone (over the cap), then 0 (f32) and 1 (bf16) apart.
  EXPECT_EQ(a.buckets, (Buckets{{3}, {2}, {0}, {1}}));
}

// The last `bytes` of gradients (one bucket's worth: here 30 of 100) go in tail-sized buckets,
// starting a bucket of their own; before them nothing changes but that the open bucket closes.
TEST(Bucketing, TheTailIsCutIntoSmallBuckets) {
  const std::vector<size_t> bytes(10, 10);
  const std::vector<DType> dtypes(10, DType::kF32);
  const BucketAssignment a = compute_bucket_assignment(bytes, dtypes, caps(30, 10, 10));
  EXPECT_EQ(a.buckets, (Buckets{{9}, {8, 7, 6}, {5, 4, 3}, {2}, {1}, {0}}));
  EXPECT_EQ(a.tail_buckets, 3u);
  EXPECT_EQ(compute_bucket_assignment(bytes, dtypes, caps(30, 10)).tail_buckets, 0u);
  // A tail that does not start on a bucket boundary: 35-byte buckets, 30 bytes of tail (the last
  // 3 parameters fit in 35, a fourth would not), in 20-byte buckets.
  const BucketAssignment b = compute_bucket_assignment(bytes, dtypes, caps(35, 10, 20));
  EXPECT_EQ(b.buckets, (Buckets{{9}, {8, 7, 6}, {5, 4, 3}, {2, 1}, {0}}));
  EXPECT_EQ(sizes(b, bytes), (std::vector<size_t>{10, 30, 30, 20, 10}));
  EXPECT_EQ(b.tail_buckets, 2u);
}

TEST(Bucketing, TheTailFollowsTheGivenOrderAndKeepsEveryParameterOnce) {
  const std::vector<size_t> bytes = {40, 5, 5, 5, 25, 5, 5};
  const std::vector<DType> dtypes(bytes.size(), DType::kF32);
  const std::vector<size_t> order = {6, 5, 4, 0, 3, 2, 1};  // 0 comes earlier than its registration says
  const BucketAssignment a = compute_bucket_assignment(bytes, dtypes, caps(20, 5, 5), order);
  // The tail is 3, 2, 1 (15 bytes; with 0 it would be 55 > 20): one bucket each.
  EXPECT_EQ(a.buckets, (Buckets{{6}, {5}, {4}, {0}, {3}, {2}, {1}}));
  std::vector<size_t> all;
  for (const auto& bucket : a.buckets) all.insert(all.end(), bucket.begin(), bucket.end());
  std::sort(all.begin(), all.end());
  std::vector<size_t> expected(bytes.size());
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(all, expected);
}

// The whole model within one bucket's bytes: all of it is tail, and the first bucket keeps the
// smaller of its own cap and the tail's.
TEST(Bucketing, AModelSmallerThanABucketIsAllTail) {
  const std::vector<size_t> bytes(4, 10);
  const std::vector<DType> dtypes(4, DType::kF32);
  const BucketAssignment a = compute_bucket_assignment(bytes, dtypes, caps(100, 50, 20));
  EXPECT_EQ(a.buckets, (Buckets{{3, 2}, {1, 0}}));
  EXPECT_EQ(a.tail_buckets, 2u);
  EXPECT_EQ(compute_bucket_assignment(bytes, dtypes, caps(100, 10, 20)).buckets, (Buckets{{3}, {2, 1}, {0}}));
}

// A last parameter larger than a bucket: no run at the end fits, so there is no tail.
TEST(Bucketing, NoTailWhenTheLastParameterFillsABucket) {
  const std::vector<size_t> bytes = {50, 10, 10, 10};
  const std::vector<DType> dtypes(4, DType::kF32);
  const BucketAssignment a = compute_bucket_assignment(bytes, dtypes, caps(30, 10, 10));
  EXPECT_EQ(a.tail_buckets, 0u);
  EXPECT_EQ(a.buckets, (Buckets{{3}, {2, 1}, {0}}));
}

// Note [Early buckets]: buckets 1, 2, ... take their own caps, the rest the common one; a
// parameter larger than its cap still gets a bucket of its own.
TEST(Bucketing, EarlyBucketsTakeTheirOwnCaps) {
  const std::vector<size_t> bytes(12, 10);
  const std::vector<DType> dtypes(12, DType::kF32);
  BucketCaps c = caps(40, 10);
  c.early_bytes = {10, 20};
  const BucketAssignment a = compute_bucket_assignment(bytes, dtypes, c);
  EXPECT_EQ(sizes(a, bytes), (std::vector<size_t>{10, 10, 20, 40, 40}));
  EXPECT_EQ(a.buckets, (Buckets{{11}, {10}, {9, 8}, {7, 6, 5, 4}, {3, 2, 1, 0}}));
  c.early_bytes = {5};
  EXPECT_EQ(compute_bucket_assignment(bytes, dtypes, c).buckets.at(1), (std::vector<size_t>{10}));
  // More early caps than buckets: the list just ends with the model.
  c.early_bytes = std::vector<size_t>(50, 100);
  EXPECT_EQ(sizes(compute_bucket_assignment(bytes, dtypes, c), bytes), (std::vector<size_t>{10, 100, 10}));
  c.early_bytes = {10, 0};
  EXPECT_THROW(compute_bucket_assignment(bytes, dtypes, c), Error);
}

TEST(Bucketing, BadArgumentsAreRefused) {
  const std::vector<size_t> bytes(3, 10);
  const std::vector<DType> dtypes(3, DType::kF32);
  EXPECT_THROW(compute_bucket_assignment(bytes, dtypes, caps(0, 10)), Error);
  EXPECT_THROW(compute_bucket_assignment(bytes, dtypes, caps(30, 10, 5), {0, 1}), Error);
  EXPECT_THROW(compute_bucket_assignment(bytes, dtypes, caps(30, 10, 5), {0, 1, 1}), Error);
  EXPECT_THROW(compute_bucket_assignment(bytes, dtypes, caps(30, 10, 5), {0, 1, 7}), Error);
}

}  // namespace
}  // namespace vitddp
