// For the CPU and GPU PowerSGD hook tests: buckets of random tensors, and PowerSGD's products as
// passes against the matrix products (Note [PowerSGD's products as bucket passes]): two hooks
// over copies of one bucket, step after step.
#pragma once

#include <cstdint>
#include <vector>

#include "distributed/hooks/powersgd.h"
#include "framework/core/random.h"

namespace vitddp::testing {

// The bucket (the step's last) of tensors of `shapes`, each `gap` elements after the last one's
// end rounded up to a multiple of `align` (and the bucket's end too), random f32 values on the
// CPU inside the tensors and zeros between them.
GradBucket random_bucket(Generator& gen, const std::vector<Shape>& shapes, int64_t gap = 0, int64_t align = 1);

// Runs `steps` steps of a hook with `options` (bucket_pass_products on) and of one with the
// matrix products over copies of `bucket` (the fake two-rank group), each step from the bucket's
// values as given, and expects: the sent values and the new errors within `tolerance` (relative,
// to max(1, |value|); with a 16-bit error after the first step only what follows, as the .cpp
// says why); in both hooks sent + new error = gradient + previous error; every new error finite
// (a staged error is a fresh buffer: an element the compensation missed would hold whatever the
// allocator left there); the elements between the bucket's tensors zero in both; something sent; and each step's bucket compressed by passes
// only in the first hook.
void expect_passes_send_what_gemm_sends(const GradBucket& bucket, PowerSgdOptions options, double tolerance,
                                        int steps = 3);

}  // namespace vitddp::testing
