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
};

// Assigns parameters (given by their byte sizes and dtypes, in registration order) to buckets
// in `order` (default: reverse registration order, i.e. the order gradients become ready).
// A bucket closes when it would exceed its cap; the first bucket's cap is `first_cap_bytes`
// (PyTorch uses a small first bucket so communication starts early), the rest `cap_bytes`.
// Parameters of different dtypes never share a bucket. A parameter larger than a cap gets a
// bucket of its own.
BucketAssignment compute_bucket_assignment(const std::vector<size_t>& bytes, const std::vector<DType>& dtypes,
                                           size_t cap_bytes, size_t first_cap_bytes,
                                           const std::vector<size_t>& order = {});

}  // namespace vitddp
