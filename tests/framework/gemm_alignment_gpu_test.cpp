// Note [Operand alignment]: a bf16 product into f32 whose operands sit at any element (PowerSGD's
// rank-1 factors are slices of one flat buffer) runs, and gives the CPU's f32 product of the same
// bf16 values; products of 16-byte aligned operands plan as before.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/gpu.h"
#include "common/test_utils.h"
#include "framework/cuda/linear.h"

namespace vitddp {
namespace {

TEST(GemmAlignmentGpu, MisalignedBf16FactorsIntoF32) {
  VITDDP_REQUIRE_GPU();
  Generator gen(7);
  const int64_t n = 96, m = 40;
  for (int64_t offset : {0, 1, 3, 5}) {  // elements: 0, 2, 6 and 10 bytes past an aligned block
    SCOPED_TRACE(offset);
    const Tensor a32 = testing::random_tensor({n, m}, gen, DType::kF32);
    const Tensor b32 = testing::random_tensor({m, 1}, gen, DType::kF32);
    // The bf16 values, and their exact f32 images for the reference.
    const Tensor a16 = a32.to(DType::kBF16), b16 = b32.to(DType::kBF16);
    const std::vector<double> a = a16.to(DType::kF32).to_vector(), b = b16.to(DType::kF32).to_vector();
    Tensor a_dev = a16.to(Device::cuda(0));
    Tensor flat = Tensor::zeros({m + 8}, DType::kBF16, Device::cuda(0));
    Tensor b_dev = flat.as_strided({m, 1}, {1, 1}, offset);
    b_dev.copy_(b16.to(Device::cuda(0)));
    Tensor c_flat = Tensor::zeros({n + 8}, DType::kF32, Device::cuda(0));
    Tensor c_dev = c_flat.as_strided({n, 1}, {1, 1}, offset);
    cuda::matmul_forward(a_dev, b_dev, c_dev, 1, n, m, 1, false);
    const std::vector<double> c = c_dev.to(Device::cpu()).to_vector();
    for (int64_t i = 0; i < n; ++i) {
      double want = 0;
      for (int64_t k = 0; k < m; ++k) want += a[i * m + k] * b[k];
      EXPECT_NEAR(c[i], want, 1e-4 * (1 + std::fabs(want))) << "row " << i;
    }
  }
}

}  // namespace
}  // namespace vitddp
