// PowerSGD's fused bucket passes on the GPU against the CPU versions (framework/cpu/low_rank.h),
// at ViT-L/32's largest group shape class (rows of 1024 and more than one block of threads) and
// a narrow one, in f32 and bf16 buckets, rank 4.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/gpu.h"
#include "common/test_utils.h"
#include "framework/cpu/low_rank.h"

namespace vitddp {
namespace {

TEST(LowRankGpu, FusedPassesMatchTheCpu) {
  VITDDP_REQUIRE_GPU();
#if VITDDP_WITH_CUDA
  const Device gpu = Device::cuda(0);
  Generator gen(3);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t m : {int64_t{1030}, int64_t{7}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " m=" + std::to_string(m));
      LowRankGroup g;
      g.count = 3, g.n = 5, g.m = m, g.rank = 4, g.offset = 9, g.stride = 5 * m + 3, g.p_offset = 2, g.q_offset = 6;
      const int64_t numel = g.offset + 3 * g.stride;
      Tensor grad = testing::random_tensor({numel}, gen, DType::kF32).to(dtype);
      Tensor error = testing::random_tensor({numel}, gen, DType::kF32);
      Tensor p = testing::random_tensor({2 + 3 * 5 * 4}, gen, DType::kF32);
      Tensor q = testing::random_tensor({6 + 3 * m * 4}, gen, DType::kF32);

      Tensor cpu_comp = Tensor::empty({numel}, DType::kF32), gpu_comp = Tensor::empty({numel}, DType::kF32, gpu);
      cpu::add_widened(grad, error, cpu_comp);
      cuda::add_widened(grad.to(gpu), error.to(gpu), gpu_comp);
      EXPECT_EQ(gpu_comp.to_vector(), cpu_comp.to_vector());

      Tensor cpu_out = grad.clone(), gpu_out = grad.to(gpu);
      Tensor cpu_flag = Tensor::zeros({1}, DType::kI64), gpu_flag = Tensor::zeros({1}, DType::kI64, gpu);
      cpu::expand_low_rank(p, q, g, cpu_out, cpu_comp, cpu_flag);
      cuda::expand_low_rank(p.to(gpu), q.to(gpu), g, gpu_out, gpu_comp, gpu_flag);
      // f32: summation order only (fused multiply-adds); bf16: at most one rounding step of values below 4.
      EXPECT_LE(testing::max_abs_diff(gpu_out.to(Device::cpu()), cpu_out), dtype == DType::kF32 ? 1e-5 : 0.02);
      EXPECT_LE(testing::max_abs_diff(gpu_comp.to(Device::cpu()), cpu_comp), 1e-5);
      EXPECT_EQ(gpu_flag.to_vector()[0], 0);
      double moved = 0;  // the expansion did write something
      std::vector<double> before = grad.to_vector(), after = cpu_out.to_vector();
      for (size_t i = 0; i < before.size(); ++i) moved += std::abs(after[i] - before[i]);
      EXPECT_GT(moved, 1.0);
    }
  }
#endif
}

}  // namespace
}  // namespace vitddp
