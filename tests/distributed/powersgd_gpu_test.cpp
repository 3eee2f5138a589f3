// PowerSGD's hook on a GPU, with the fake two-rank group: the products as passes (Note
// [PowerSGD's products as bucket passes]) against cuBLASLt's, over a bf16 bucket whose tensors
// lie apart with padding between them. Staged, the new error is a fresh (poisoned) buffer, so a
// gap the compensation missed would leave NaN there.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/fake_group.h"
#include "common/gpu.h"
#include "common/test_utils.h"
#include "distributed/hooks/powersgd.h"

namespace vitddp {
namespace {

// Every new GPU allocation filled with NaN (framework/cuda/allocator.cpp).
const bool kPoisonAllocations = (setenv("VITDDP_POISON_ALLOC", "1", 1), true);

// Tensors at offsets rounded up to 8 elements, plus 3: gaps of zeros between all of them.
GradBucket padded_bucket(Generator& gen, const std::vector<Shape>& shapes, const Device& device) {
  GradBucket b;
  int64_t at = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    b.params.push_back(i);
    b.offsets.push_back(at);
    b.shapes.push_back(shapes[i]);
    at = (at + shape_numel(shapes[i]) + 3 + 7) / 8 * 8;
  }
  std::vector<double> values(at, 0.0);
  const std::vector<double> random = testing::random_tensor({at}, gen, DType::kF32).to_vector();
  for (size_t i = 0; i < shapes.size(); ++i)
    for (int64_t j = 0; j < shape_numel(shapes[i]); ++j) values[b.offsets[i] + j] = random[b.offsets[i] + j];
  b.buffer = Tensor::from_vector(values, {at}).to(DType::kBF16).to(device);
  b.is_last = true;
  return b;
}

TEST(PowerSgdGpu, BucketPassesSendWhatTheMatrixProductsSend) {
  VITDDP_REQUIRE_GPU();
  ASSERT_TRUE(kPoisonAllocations);
  const Device gpu = Device::cuda(0);
  for (bool staged : {true, false})
    for (bool narrow_error : {true, false}) {
      SCOPED_TRACE(std::string(staged ? "staged" : "in place") + (narrow_error ? ", bf16 error" : ", f32 error"));
      Generator gen(31);
      GradBucket passes_bucket =
          padded_bucket(gen, {{64, 128}, {64}, {64, 128}, {5}, {96, 32}, {64, 128}, {7}}, gpu);
      GradBucket gemm_bucket = passes_bucket;
      gemm_bucket.buffer = passes_bucket.buffer.clone();
      const Tensor input = passes_bucket.buffer.clone();
      const std::vector<double> input_values = input.to_vector();
      testing::FakeGroup group;
      PowerSgdOptions with_passes{4, 0, 2.0, true, true, 5};
      with_passes.stage_state = staged;
      with_passes.error_in_bucket_dtype = narrow_error;
      PowerSgdOptions with_gemm = with_passes;
      with_gemm.bucket_pass_products = false;
      PowerSgdHook passes_hook(with_passes), gemm_hook(with_gemm);
      for (int step = 0; step < 3; ++step) {
        passes_bucket.buffer.copy_(input);
        gemm_bucket.buffer.copy_(input);
        passes_hook.run(group, passes_bucket)->wait();
        gemm_hook.run(group, gemm_bucket)->wait();
        const std::vector<double> a = passes_bucket.buffer.to_vector(), b = gemm_bucket.buffer.to_vector();
        const std::vector<double> ea = passes_hook.state().buckets.at(0).error.to_vector();
        const std::vector<double> eb = gemm_hook.state().buckets.at(0).error.to_vector();
        // cuBLASLt's path rounds P and Q to bf16 for a bf16 M; the passes keep them in f32.
        const double tolerance = narrow_error ? 0.05 : 0.01;
        double moved = 0;
        for (size_t i = 0; i < a.size(); ++i) {
          ASSERT_TRUE(std::isfinite(ea[i])) << "step " << step << ": the new error at " << i << " was never written";
          EXPECT_NEAR(a[i], b[i], tolerance * std::max(1.0, std::abs(b[i]))) << "step " << step << " at " << i;
          EXPECT_NEAR(ea[i], eb[i], tolerance * std::max(1.0, std::abs(eb[i]))) << "step " << step << " at " << i;
          moved += std::abs(a[i] - input_values[i]);
        }
        EXPECT_GT(moved, 1.0);
        for (size_t t = 0; t + 1 < passes_bucket.offsets.size(); ++t)  // the gaps: zero in, zero out
          for (int64_t i = passes_bucket.offsets[t] + shape_numel(passes_bucket.shapes[t]);
               i < passes_bucket.offsets[t + 1]; ++i) {
            EXPECT_EQ(a[i], 0.0) << i;
            EXPECT_EQ(ea[i], 0.0) << i;
          }
      }
      EXPECT_EQ(passes_hook.buckets_by_passes(), 3);
      EXPECT_EQ(gemm_hook.buckets_by_passes(), 0);
    }
}

}  // namespace
}  // namespace vitddp
