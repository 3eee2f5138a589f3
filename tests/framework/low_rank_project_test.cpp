// PowerSGD's products as bucket passes on the CPU (framework/cpu/low_rank_project.h) against
// plain double-precision loops: the compensation fused with P = M Q writes M only inside the
// group's matrices, Q = M^T P reads M as stored.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/test_utils.h"
#include "framework/cpu/low_rank_project.h"

namespace vitddp {
namespace {

// Two 3x5 matrices 20 elements apart starting at 2 (gaps of 5 between them), rank 2.
LowRankGroup small_group() {
  LowRankGroup g;
  g.count = 2, g.n = 3, g.m = 5, g.rank = 2, g.offset = 2, g.stride = 20, g.p_offset = 1, g.q_offset = 3;
  return g;
}

double rounded(double v, DType dtype) { return Tensor::from_vector({v}, {1}).to(dtype).to_vector()[0]; }

TEST(LowRankProject, CompensationWritesMInsideTheMatricesAndPIsMTimesQ) {
  for (DType dtype : {DType::kF32, DType::kBF16})
    for (DType error_dtype : {DType::kF32, dtype}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " error " + dtype_name(error_dtype));
      Generator gen(21);
      const LowRankGroup g = small_group();
      Tensor grad = testing::random_tensor({45}, gen, DType::kF32).to(dtype);
      Tensor error = testing::random_tensor({45}, gen, DType::kF32).to(error_dtype);
      Tensor q = testing::random_tensor({3 + 2 * 5 * 2}, gen, DType::kF32);
      Tensor p = testing::random_tensor({1 + 2 * 3 * 2}, gen, DType::kF32);
      Tensor m = testing::random_tensor({45}, gen, DType::kF32).to(error_dtype);
      const std::vector<double> gv = grad.to_vector(), ev = error.to_vector(), m0 = m.to_vector(), qv = q.to_vector();
      const std::vector<double> p0 = p.to_vector();
      cpu::compensate_and_project(grad, error, Tensor(), q, g, m, p);
      const std::vector<double> mv = m.to_vector(), pv = p.to_vector();
      std::vector<bool> inside(45, false);
      for (int k = 0; k < 2; ++k)
        for (int i = 0; i < 3; ++i) {
          for (int t = 0; t < 2; ++t) {
            double want = 0;
            for (int j = 0; j < 5; ++j) {
              const int at = 2 + k * 20 + i * 5 + j;
              want += rounded(gv[at] + ev[at], error_dtype) * qv[3 + k * 10 + j * 2 + t];
            }
            EXPECT_NEAR(pv[1 + k * 6 + i * 2 + t], want, 1e-5) << k << " " << i << " " << t;
          }
          for (int j = 0; j < 5; ++j) {
            const int at = 2 + k * 20 + i * 5 + j;
            inside[at] = true;
            EXPECT_EQ(mv[at], rounded(gv[at] + ev[at], error_dtype)) << at;
          }
        }
      for (int at = 0; at < 45; ++at)
        if (!inside[at]) EXPECT_EQ(mv[at], m0[at]) << at;
      EXPECT_EQ(pv[0], p0[0]);  // before the group's P
    }
}

TEST(LowRankProject, InPlaceTheErrorBecomesM) {
  Generator gen(22);
  const LowRankGroup g = small_group();
  Tensor grad = testing::random_tensor({45}, gen, DType::kF32).to(DType::kBF16);
  Tensor error = testing::random_tensor({45}, gen, DType::kF32).to(DType::kBF16);
  Tensor q = testing::random_tensor({23}, gen, DType::kF32);
  Tensor apart = Tensor::empty({45}, DType::kBF16), p_apart = Tensor::zeros({13}, DType::kF32);
  Tensor p_in_place = Tensor::zeros({13}, DType::kF32);
  cpu::compensate_and_project(grad, error, Tensor(), q, g, apart, p_apart);
  Tensor in_place = error.clone();
  cpu::compensate_and_project(grad, in_place, Tensor(), q, g, in_place, p_in_place);
  EXPECT_EQ(p_in_place.to_vector(), p_apart.to_vector());
  const std::vector<double> a = apart.to_vector(), b = in_place.to_vector();
  for (int at : {2, 16, 22, 36}) EXPECT_EQ(b[at], a[at]) << at;
}

// Note [The error settled a step late]: with a sent P the error buffer holds last step's M, and
// M := grad + error - S Q^T with Q's rows as P = M Q reads them.
TEST(LowRankProject, ASentPIsSubtractedBeforeTheProduct) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Generator gen(24);
    const LowRankGroup g = small_group();
    Tensor grad = testing::random_tensor({45}, gen, DType::kF32).to(dtype);
    Tensor error = testing::random_tensor({45}, gen, DType::kF32);
    Tensor q = testing::random_tensor({23}, gen, DType::kF32);
    Tensor sent = testing::random_tensor({13}, gen, DType::kF32);
    Tensor m = Tensor::zeros({45}, DType::kF32), p = Tensor::zeros({13}, DType::kF32);
    cpu::compensate_and_project(grad, error, sent, q, g, m, p);
    const std::vector<double> gv = grad.to_vector(), ev = error.to_vector(), qv = q.to_vector(), sv = sent.to_vector();
    const std::vector<double> mv = m.to_vector(), pv = p.to_vector();
    for (int k = 0; k < 2; ++k)
      for (int i = 0; i < 3; ++i) {
        double p_want[2] = {0, 0};
        for (int j = 0; j < 5; ++j) {
          const int at = 2 + k * 20 + i * 5 + j;
          double approx = 0;
          for (int t = 0; t < 2; ++t) approx += sv[1 + k * 6 + i * 2 + t] * qv[3 + k * 10 + j * 2 + t];
          EXPECT_NEAR(mv[at], gv[at] + ev[at] - approx, 1e-5) << at;
          for (int t = 0; t < 2; ++t) p_want[t] += mv[at] * qv[3 + k * 10 + j * 2 + t];
        }
        for (int t = 0; t < 2; ++t) EXPECT_NEAR(pv[1 + k * 6 + i * 2 + t], p_want[t], 1e-5) << k << " " << i;
      }
    EXPECT_EQ(mv[0], 0.0);  // outside the group
  }
}

TEST(LowRankProject, QIsMTransposedTimesP) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    Generator gen(23);
    const LowRankGroup g = small_group();
    Tensor m = testing::random_tensor({45}, gen, DType::kF32).to(dtype);
    Tensor p = testing::random_tensor({13}, gen, DType::kF32);
    Tensor q = testing::random_tensor({23}, gen, DType::kF32);
    const std::vector<double> q0 = q.to_vector();
    cpu::project_transposed(m, p, g, q);
    const std::vector<double> mv = m.to_vector(), pv = p.to_vector(), qv = q.to_vector();
    for (int k = 0; k < 2; ++k)
      for (int j = 0; j < 5; ++j)
        for (int t = 0; t < 2; ++t) {
          double want = 0;
          for (int i = 0; i < 3; ++i) want += mv[2 + k * 20 + i * 5 + j] * pv[1 + k * 6 + i * 2 + t];
          EXPECT_NEAR(qv[3 + k * 10 + j * 2 + t], want, 1e-5) << dtype_name(dtype);
        }
    for (int at = 0; at < 3; ++at) EXPECT_EQ(qv[at], q0[at]);  // before the group's Q
  }
}

TEST(LowRankProject, BadBuffersAreRefused) {
  const LowRankGroup g = small_group();
  Tensor grad = Tensor::zeros({45}, DType::kBF16), error = Tensor::zeros({45}, DType::kF32);
  Tensor p = Tensor::zeros({13}, DType::kF32), q = Tensor::zeros({23}, DType::kF32);
  // M's dtype differs from the error's.
  EXPECT_THROW(cpu::compensate_and_project(grad, error, Tensor(), q, g, Tensor::zeros({45}, DType::kBF16), p), Error);
  // An f16 error beside a bf16 bucket.
  EXPECT_THROW(cpu::compensate_and_project(grad, Tensor::zeros({45}, DType::kF16), Tensor(), q, g,
                                           Tensor::zeros({45}, DType::kF16), p),
               Error);
  // Q too short for the group; P in bf16.
  EXPECT_THROW(cpu::compensate_and_project(grad, error, Tensor(), Tensor::zeros({22}, DType::kF32), g, error, p),
               Error);
  // A sent P too short for the group, or sharing P's memory.
  EXPECT_THROW(cpu::compensate_and_project(grad, error, Tensor::zeros({12}, DType::kF32), q, g, error, p), Error);
  EXPECT_THROW(cpu::compensate_and_project(grad, error, p, q, g, error, p), Error);
  EXPECT_THROW(cpu::project_transposed(error, p.to(DType::kBF16), g, q), Error);
  LowRankGroup overlapping = g;
  overlapping.stride = 10;  // matrices of 15 elements 10 apart
  EXPECT_THROW(cpu::project_transposed(error, p, overlapping, q), Error);
}

}  // namespace
}  // namespace vitddp
