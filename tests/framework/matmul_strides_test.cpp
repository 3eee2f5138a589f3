// Batched products whose entries sit at chosen distances (MatmulStrides) against one product per
// entry, forward and both gradients, on the CPU; the GPU counterpart is in
// cuda_ops_gpu_test.cpp.
#include <gtest/gtest.h>

#include "common/test_utils.h"
#include "framework/cpu/linear.h"

namespace vitddp {
namespace {

TEST(MatmulStrides, StridedBatchesEqualOneProductPerEntry) {
  Generator gen(21);
  const int64_t batch = 3, M = 5, K = 4, N = 2;
  const MatmulStrides st{M * K + 7, K * N + 3, M * N + 5};  // gaps between the entries
  Tensor a = testing::random_tensor({batch * st.a}, gen, DType::kF32);
  Tensor b = testing::random_tensor({batch * st.b}, gen, DType::kF32);
  Tensor dc = testing::random_tensor({batch * st.c}, gen, DType::kF32);
  Tensor c = Tensor::zeros({batch * st.c}, DType::kF32), da = Tensor::zeros({batch * st.a}, DType::kF32),
         db = Tensor::zeros({batch * st.b}, DType::kF32);
  cpu::matmul_forward(a, b, c, batch, M, K, N, false, st);
  cpu::matmul_backward(a, b, dc, da, db, batch, M, K, N, false, st);
  auto entry = [](const Tensor& t, int64_t stride, int64_t i, const Shape& shape) {
    return t.as_strided(shape, contiguous_strides(shape), t.storage_offset() + i * stride).contiguous();
  };
  for (int64_t i = 0; i < batch; ++i) {
    Tensor ai = entry(a, st.a, i, {M, K}), bi = entry(b, st.b, i, {K, N}), dci = entry(dc, st.c, i, {M, N});
    Tensor ci = Tensor::zeros({M, N}, DType::kF32), dai = Tensor::zeros({M, K}, DType::kF32),
           dbi = Tensor::zeros({K, N}, DType::kF32);
    cpu::matmul_forward(ai, bi, ci, 1, M, K, N, false);
    cpu::matmul_backward(ai, bi, dci, dai, dbi, 1, M, K, N, false);
    EXPECT_LT(testing::max_abs_diff(entry(c, st.c, i, {M, N}), ci), 1e-6) << i;
    EXPECT_LT(testing::max_abs_diff(entry(da, st.a, i, {M, K}), dai), 1e-6) << i;
    EXPECT_LT(testing::max_abs_diff(entry(db, st.b, i, {K, N}), dbi), 1e-6) << i;
  }
  // The gaps are left alone.
  EXPECT_EQ(c.to_vector()[M * N], 0.0);
  EXPECT_EQ(da.to_vector()[M * K], 0.0);
}

}  // namespace
}  // namespace vitddp
