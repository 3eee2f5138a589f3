#include "common/powersgd_paths.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/fake_group.h"
#include "common/test_utils.h"

namespace vitddp::testing {

GradBucket random_bucket(Generator& gen, const std::vector<Shape>& shapes, int64_t gap, int64_t align) {
  GradBucket b;
  int64_t at = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    b.params.push_back(i);
    b.offsets.push_back(at);
    b.shapes.push_back(shapes[i]);
    at = (at + shape_numel(shapes[i]) + gap + align - 1) / align * align;
  }
  std::vector<double> values(at, 0.0);
  const std::vector<double> random = random_tensor({at}, gen, DType::kF32).to_vector();
  for (size_t i = 0; i < shapes.size(); ++i)
    for (int64_t j = 0; j < shape_numel(shapes[i]); ++j) values[b.offsets[i] + j] = random[b.offsets[i] + j];
  b.buffer = Tensor::from_vector(values, {at});
  b.is_last = true;
  return b;
}

void expect_passes_send_what_gemm_sends(const GradBucket& bucket, PowerSgdOptions options, double tolerance,
                                        int steps) {
  GradBucket passes_bucket = bucket, gemm_bucket = bucket;
  passes_bucket.buffer = bucket.buffer.clone();
  gemm_bucket.buffer = bucket.buffer.clone();
  const std::vector<double> input = bucket.buffer.to_vector();
  std::vector<bool> between(input.size(), true);  // the elements no tensor of the bucket holds
  for (size_t t = 0; t < bucket.offsets.size(); ++t)
    for (int64_t i = 0; i < shape_numel(bucket.shapes[t]); ++i) between[bucket.offsets[t] + i] = false;
  FakeGroup group;
  options.bucket_pass_products = true;
  PowerSgdOptions gemm_options = options;
  gemm_options.bucket_pass_products = false;
  PowerSgdHook passes_hook(options), gemm_hook(gemm_options);
  // Note [The error settled a step late]: with a 16-bit error the gemm path rounds M - P Q^T to
  // 16 bits each step and the passes do not, so from the second step on the two drift apart (a
  // rank-r approximation of small matrices amplifies it): there each hook is held to what error
  // feedback promises instead, sent + new error = gradient + previous error, within 16 bits.
  const bool narrow_error = options.error_in_bucket_dtype && bucket.buffer.dtype() != DType::kF32;
  // Four roundings at most (M, the new error, what is sent, the previous error as read back), each
  // within half a step of its value: 2^-8 relative in bf16.
  const double kept = bucket.buffer.dtype() == DType::kF32 ? 1e-5 : 4.0 / 256;
  std::vector<double> previous_a(input.size(), 0.0), previous_b(input.size(), 0.0);
  for (int step = 0; step < steps; ++step) {
    passes_bucket.buffer.copy_(bucket.buffer);
    gemm_bucket.buffer.copy_(bucket.buffer);
    passes_hook.run(group, passes_bucket)->wait();
    gemm_hook.run(group, gemm_bucket)->wait();
    const std::vector<double> a = passes_bucket.buffer.to_vector(), b = gemm_bucket.buffer.to_vector();
    const std::vector<double> ea = passes_hook.settled_error(bucket.index).to_vector();
    const std::vector<double> eb = gemm_hook.settled_error(bucket.index).to_vector();
    const bool compare = step == 0 || !narrow_error;
    double moved = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(std::isfinite(ea[i])) << "step " << step << ": the new error at " << i << " was never written";
      if (compare) {
        EXPECT_NEAR(a[i], b[i], tolerance * std::max(1.0, std::abs(b[i]))) << "step " << step << " at " << i;
        EXPECT_NEAR(ea[i], eb[i], tolerance * std::max(1.0, std::abs(eb[i]))) << "step " << step << " at " << i;
      }
      const double ma = input[i] + previous_a[i], mb = input[i] + previous_b[i];
      const double scale_a = std::max({1.0, std::abs(ma), std::abs(a[i]), std::abs(ea[i])});
      const double scale_b = std::max({1.0, std::abs(mb), std::abs(b[i]), std::abs(eb[i])});
      EXPECT_NEAR(a[i] + ea[i], ma, kept * scale_a) << "passes, step " << step << " at " << i;
      EXPECT_NEAR(b[i] + eb[i], mb, kept * scale_b) << "gemm, step " << step << " at " << i;
      if (between[i]) {
        EXPECT_EQ(a[i], 0.0) << "step " << step << " at " << i;
        EXPECT_EQ(ea[i], 0.0) << "step " << step << " at " << i;
      }
      moved += std::abs(a[i] - input[i]);
    }
    EXPECT_GT(moved, 1e-2) << "step " << step;
    previous_a = ea;
    previous_b = eb;
  }
  EXPECT_EQ(passes_hook.buckets_by_passes(), steps);
  EXPECT_EQ(gemm_hook.buckets_by_passes(), 0);
}

}  // namespace vitddp::testing
