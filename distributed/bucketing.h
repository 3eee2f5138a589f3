// Bucket assignment for the DDP reducer: a pure function, tested on the CPU.
// See Note [Bucket order] in bucketing.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "framework/core/dtype.h"

namespace vitddp {

struct BucketAssignment {
  std::vector<std::vector<size_t>> buckets;  // parameter indices per bucket, in bucket order
  size_t tail_buckets = 0;                    // how many of the last ones hold the tail (BucketCaps::tail_bytes)
};

struct BucketCaps {
  size_t bytes = 25u << 20;       // every bucket's cap but the ones below (--bucket-mb)
  size_t first_bytes = 1u << 20;  // the first bucket's: communication starts early (first-bucket-mb)
  // The caps of buckets 1, 2, ... in order (early-bucket-mb); the buckets after them take
  // `bytes`. Small ones keep the link fed right after the first bucket (Note [Early buckets]).
  std::vector<size_t> early_bytes;
  // 0: none. Else the cap of the buckets that hold the tail: the longest run of parameters at the
  // end of the order (the first layers', ready when backward ends) whose gradients fit in one
  // bucket (`bytes`). The tail starts a bucket of its own; less communication is then left to run
  // after backward (Note [The tail buckets]; tail-bucket-mb).
  size_t tail_bytes = 0;
};

// Assigns parameters (given by their byte sizes and dtypes, in registration order) to buckets
// in `order` (default: reverse registration order, i.e. the order gradients become ready).
// A bucket closes when it would exceed its cap (`caps`); the first bucket's cap is
// caps.first_bytes (PyTorch uses a small first bucket so communication starts early), the next
// ones' caps.early_bytes.
// Parameters of different dtypes never share a bucket. A parameter larger than a cap gets a
// bucket of its own.
BucketAssignment compute_bucket_assignment(const std::vector<size_t>& bytes, const std::vector<DType>& dtypes,
                                           const BucketCaps& caps, const std::vector<size_t>& order = {});

}  // namespace vitddp
