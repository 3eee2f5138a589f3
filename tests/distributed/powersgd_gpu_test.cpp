// PowerSGD's hook on a GPU, with the fake two-rank group: the products as passes (Note
// [PowerSGD's products as bucket passes]) against cuBLASLt's, over a bf16 bucket whose tensors
// lie apart with padding between them. Staged, the new error is a fresh (poisoned) buffer, so a
// gap the compensation missed would leave NaN there.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/gpu.h"
#include "common/powersgd_paths.h"
#include "common/test_utils.h"

namespace vitddp {
namespace {

// Every new GPU allocation filled with NaN (framework/cuda/allocator.cpp).
const bool kPoisonAllocations = (setenv("VITDDP_POISON_ALLOC", "1", 1), true);

// Tensors at offsets rounded up to 8 elements, plus 3: gaps of zeros between all of them; bf16.
GradBucket padded_bucket(Generator& gen, const std::vector<Shape>& shapes, const Device& device) {
  GradBucket b = testing::random_bucket(gen, shapes, /*gap=*/3, /*align=*/8);
  b.buffer = b.buffer.to(DType::kBF16).to(device);
  return b;
}

TEST(PowerSgdGpu, BucketPassesSendWhatTheMatrixProductsSend) {
  VITDDP_REQUIRE_GPU();
  ASSERT_TRUE(kPoisonAllocations);
  for (bool staged : {true, false})
    for (bool narrow_error : {true, false}) {
      SCOPED_TRACE(std::string(staged ? "staged" : "in place") + (narrow_error ? ", bf16 error" : ", f32 error"));
      Generator gen(31);
      const GradBucket bucket =
          padded_bucket(gen, {{64, 128}, {64}, {64, 128}, {5}, {96, 32}, {64, 128}, {7}}, Device::cuda(0));
      PowerSgdOptions options{4, 0, 2.0, true, true, 5};
      options.stage_state = staged;
      options.error_in_bucket_dtype = narrow_error;
      // cuBLASLt's path rounds P and Q to bf16 for a bf16 M; the passes keep them in f32.
      testing::expect_passes_send_what_gemm_sends(bucket, options, narrow_error ? 0.05 : 0.01);
    }
}

}  // namespace
}  // namespace vitddp
