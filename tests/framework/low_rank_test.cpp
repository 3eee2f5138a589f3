// PowerSGD's fused bucket passes on the CPU (framework/cpu/low_rank.h) against plain loops:
// compensation widens and adds, expansion writes P Q^T only where the group's matrices lie and
// subtracts the same values from the residual.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/test_utils.h"
#include "framework/cpu/low_rank.h"

namespace vitddp {
namespace {

TEST(LowRank, AddWidenedAddsTheErrorToTheWidenedGradient) {
  Generator gen(1);
  Tensor grad = testing::random_tensor({37}, gen, DType::kF32).to(DType::kBF16);
  Tensor error = testing::random_tensor({37}, gen, DType::kF32);
  Tensor out = Tensor::empty({37}, DType::kF32);
  cpu::add_widened(grad, error, out);
  std::vector<double> g = grad.to_vector(), e = error.to_vector(), o = out.to_vector();
  for (size_t i = 0; i < o.size(); ++i) EXPECT_FLOAT_EQ(o[i], static_cast<float>(g[i]) + static_cast<float>(e[i]));
}

// Two 3x5 matrices 20 elements apart starting at 2 (gaps of 5 left alone), rank 2.
TEST(LowRank, ExpandWritesTheProductAndSubtractsItFromTheResidual) {
  Generator gen(2);
  LowRankGroup g;
  g.count = 2, g.n = 3, g.m = 5, g.rank = 2, g.offset = 2, g.stride = 20, g.p_offset = 1, g.q_offset = 3;
  Tensor p = testing::random_tensor({1 + 2 * 3 * 2}, gen, DType::kF32);
  Tensor q = testing::random_tensor({3 + 2 * 5 * 2}, gen, DType::kF32);
  Tensor out = testing::random_tensor({45}, gen, DType::kF32);
  Tensor residual = testing::random_tensor({45}, gen, DType::kF32);
  const std::vector<double> out0 = out.to_vector(), res0 = residual.to_vector();
  Tensor flag = Tensor::zeros({1}, DType::kI64);
  cpu::expand_low_rank(p, q, g, out, residual, flag);
  const std::vector<double> pv = p.to_vector(), qv = q.to_vector(), o = out.to_vector(), r = residual.to_vector();
  std::vector<bool> touched(45, false);
  for (int k = 0; k < 2; ++k)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j) {
        double approx = 0;
        for (int t = 0; t < 2; ++t) approx += pv[1 + k * 6 + i * 2 + t] * qv[3 + k * 10 + j * 2 + t];
        const int at = 2 + k * 20 + i * 5 + j;
        touched[at] = true;
        EXPECT_NEAR(o[at], approx, 1e-6) << at;
        EXPECT_NEAR(r[at], res0[at] - approx, 1e-6) << at;
      }
  for (int at = 0; at < 45; ++at)
    if (!touched[at]) {
      EXPECT_EQ(o[at], out0[at]) << at;
      EXPECT_EQ(r[at], res0[at]) << at;
    }
  EXPECT_EQ(flag.to_vector()[0], 0);
}

TEST(LowRank, ExpandIntoBf16MarksANonFiniteResidual) {
  LowRankGroup g;
  g.count = 1, g.n = 2, g.m = 2, g.rank = 1;
  Tensor p = Tensor::from_vector({1.0, 2.0}, {2});
  Tensor q = Tensor::from_vector({3.0, 0.5}, {2});
  Tensor out = Tensor::zeros({4}, DType::kBF16);
  Tensor residual = Tensor::from_vector({0.0, 0.0, std::numeric_limits<double>::infinity(), 0.0}, {4});
  Tensor flag = Tensor::zeros({1}, DType::kI64);
  cpu::expand_low_rank(p, q, g, out, residual, flag);
  EXPECT_EQ(out.to_vector(), (std::vector<double>{3.0, 0.5, 6.0, 1.0}));
  EXPECT_EQ(flag.to_vector()[0], 1);
}

// powersgd-error-dtype bucket: the error and M in the bucket's bf16. Compensation rounds the
// sum once to bf16; the expansion leaves the residual as bf16(residual - P Q^T) and flags a
// residual that only bf16 overflows.
TEST(LowRank, ABucketDtypeErrorIsAddedAndReducedInThatDtype) {
  Generator gen(4);
  Tensor grad = testing::random_tensor({37}, gen, DType::kF32).to(DType::kBF16);
  Tensor error = testing::random_tensor({37}, gen, DType::kF32).to(DType::kBF16);
  Tensor out = Tensor::empty({37}, DType::kBF16);
  cpu::add_widened(grad, error, out);
  std::vector<double> g = grad.to_vector(), e = error.to_vector(), o = out.to_vector();
  for (size_t i = 0; i < o.size(); ++i) {
    const double want = Tensor::from_vector({g[i] + e[i]}, {1}).to(DType::kBF16).to_vector()[0];
    EXPECT_EQ(o[i], want) << i;
  }
  EXPECT_THROW(cpu::add_widened(grad, error, Tensor::empty({37}, DType::kF32)), Error);  // error and M differ
  EXPECT_THROW(cpu::add_widened(grad, error.to(DType::kF16), Tensor::empty({37}, DType::kF16)), Error);

  LowRankGroup lr;
  lr.count = 1, lr.n = 2, lr.m = 2, lr.rank = 1;
  Tensor p = Tensor::from_vector({1.0, 2.0}, {2});
  Tensor q = Tensor::from_vector({3.0, 0.5}, {2});
  Tensor bucket = Tensor::zeros({4}, DType::kBF16);
  Tensor residual = Tensor::from_vector({3.25, 0.0, 6.0, 1.0}, {4}).to(DType::kBF16);
  Tensor flag = Tensor::zeros({1}, DType::kI64);
  cpu::expand_low_rank(p, q, lr, bucket, residual, flag);
  EXPECT_EQ(bucket.to_vector(), (std::vector<double>{3.0, 0.5, 6.0, 1.0}));
  EXPECT_EQ(residual.dtype(), DType::kBF16);
  EXPECT_EQ(residual.to_vector(), (std::vector<double>{0.25, -0.5, 0.0, 0.0}));
  EXPECT_EQ(flag.to_vector()[0], 0);
  // bf16's largest value (3.3895e38) minus -1e36 is 3.3995e38: finite in f32, Inf in bf16.
  Tensor big_p = Tensor::from_vector({-1e36, 0.0}, {2}), big_q = Tensor::from_vector({1.0, 0.0}, {2});
  Tensor near_max = Tensor::from_vector({3.3895e38, 0.0, 0.0, 0.0}, {4});
  Tensor f32_flag = Tensor::zeros({1}, DType::kI64);
  cpu::expand_low_rank(big_p, big_q, lr, bucket, near_max.clone(), f32_flag);
  EXPECT_EQ(f32_flag.to_vector()[0], 0);
  Tensor bf16_residual = near_max.to(DType::kBF16);
  cpu::expand_low_rank(big_p, big_q, lr, bucket, bf16_residual, flag);
  EXPECT_TRUE(std::isinf(bf16_residual.to_vector()[0]));
  EXPECT_EQ(flag.to_vector()[0], 1);
  EXPECT_THROW(cpu::expand_low_rank(p, q, lr, bucket, Tensor::zeros({4}, DType::kF16), flag), Error);
}

TEST(LowRank, AGroupOutsideItsBuffersIsRefused) {
  LowRankGroup g;
  g.count = 2, g.n = 2, g.m = 2, g.rank = 1, g.stride = 4;
  Tensor p = Tensor::zeros({4}, DType::kF32), q = Tensor::zeros({4}, DType::kF32);
  Tensor out = Tensor::zeros({7}, DType::kF32), flag = Tensor::zeros({1}, DType::kI64);
  EXPECT_THROW(cpu::expand_low_rank(p, q, g, out, Tensor(), flag), Error);
}

// The uncompressed tensors: runs gathered back to back, scaled; scattered back into a bf16
// bucket with the residual reduced by the same values, a non-finite one flagged.
TEST(LowRank, RunsGatherScaledAndScatterIntoTheBucketAndTheResidual) {
  BucketRuns runs;
  runs.offsets = {1, 6};
  runs.numels = {2, 3};
  Tensor src = Tensor::from_vector({9, 2, 4, 9, 9, 9, 6, 8, 10}, {9}).to(DType::kF32);
  Tensor flat = Tensor::empty({5}, DType::kF32);
  cpu::gather_runs(src, runs, 0.5, flat);
  EXPECT_EQ(flat.to_vector(), (std::vector<double>{1, 2, 3, 4, 5}));

  Tensor bucket = Tensor::zeros({9}, DType::kBF16);
  Tensor residual = Tensor::from_vector({0, 10, 10, 0, 0, 0, 10, 10, 10}, {9}).to(DType::kF32);
  Tensor flag = Tensor::zeros({1}, DType::kI64);
  cpu::scatter_runs(flat, runs, bucket, residual, flag);
  EXPECT_EQ(bucket.to_vector(), (std::vector<double>{0, 1, 2, 0, 0, 0, 3, 4, 5}));
  EXPECT_EQ(residual.to_vector(), (std::vector<double>{0, 9, 8, 0, 0, 0, 7, 6, 5}));
  EXPECT_EQ(flag.to_vector()[0], 0);
  residual.data<float>()[7] = std::numeric_limits<float>::infinity();
  cpu::scatter_runs(flat, runs, bucket, residual, flag);
  EXPECT_EQ(flag.to_vector()[0], 1);

  runs.numels[1] = 4;  // past the bucket's end
  EXPECT_THROW(cpu::gather_runs(src, runs, 1.0, Tensor::empty({6}, DType::kF32)), Error);
}

// The compensation outside PowerSGD's matrices: grad + error over the runs only.
TEST(LowRank, RunsCompensationTouchesOnlyItsRuns) {
  BucketRuns runs;
  runs.offsets = {0, 6};
  runs.numels = {2, 3};
  Tensor grad = Tensor::from_vector({1, 2, 3, 4, 5, 6, 7, 8, 9}, {9}).to(DType::kBF16);
  Tensor error = Tensor::from_vector({10, 20, 30, 40, 50, 60, 70, 80, 90}, {9});
  Tensor out = Tensor::zeros({9}, DType::kF32);
  cpu::add_widened_runs(grad, error, runs, out);
  EXPECT_EQ(out.to_vector(), (std::vector<double>{11, 22, 0, 0, 0, 0, 77, 88, 99}));
  runs.numels = {2, 4};  // past the bucket's end
  EXPECT_THROW(cpu::add_widened_runs(grad, error, runs, out), Error);
}

}  // namespace
}  // namespace vitddp
