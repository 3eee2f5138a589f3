#include "common/powersgd_paths.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/fake_group.h"

namespace vitddp::testing {

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
  for (int step = 0; step < steps; ++step) {
    passes_bucket.buffer.copy_(bucket.buffer);
    gemm_bucket.buffer.copy_(bucket.buffer);
    passes_hook.run(group, passes_bucket)->wait();
    gemm_hook.run(group, gemm_bucket)->wait();
    const std::vector<double> a = passes_bucket.buffer.to_vector(), b = gemm_bucket.buffer.to_vector();
    const std::vector<double> ea = passes_hook.state().buckets.at(bucket.index).error.to_vector();
    const std::vector<double> eb = gemm_hook.state().buckets.at(bucket.index).error.to_vector();
    double moved = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(std::isfinite(ea[i])) << "step " << step << ": the new error at " << i << " was never written";
      EXPECT_NEAR(a[i], b[i], tolerance * std::max(1.0, std::abs(b[i]))) << "step " << step << " at " << i;
      EXPECT_NEAR(ea[i], eb[i], tolerance * std::max(1.0, std::abs(eb[i]))) << "step " << step << " at " << i;
      if (between[i]) {
        EXPECT_EQ(a[i], 0.0) << "step " << step << " at " << i;
        EXPECT_EQ(ea[i], 0.0) << "step " << step << " at " << i;
      }
      moved += std::abs(a[i] - input[i]);
    }
    EXPECT_GT(moved, 1e-2) << "step " << step;
  }
  EXPECT_EQ(passes_hook.buckets_by_passes(), steps);
  EXPECT_EQ(gemm_hook.buckets_by_passes(), 0);
}

}  // namespace vitddp::testing
