#include <gtest/gtest.h>

#include "common/test_utils.h"
#include "framework/core/tensor.h"
#include "framework/core/tensor_math.h"

namespace vitddp {
namespace {

TEST(Tensor, FactoriesAndMetadata) {
  Tensor t = Tensor::full({2, 3}, 1.5);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.strides(), (Shape{3, 1}));
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 24u);
  EXPECT_TRUE(t.is_contiguous());
  for (double v : t.to_vector()) EXPECT_EQ(v, 1.5);
  EXPECT_EQ(t.description(), "f32[2, 3] on cpu");
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::from_vector({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor tt = t.as_strided({3, 2}, {1, 3}, 0);  // transpose
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.to_vector(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  t.data<float>()[1] = 10;
  EXPECT_EQ(tt.to_vector()[2], 10);
  Tensor c = tt.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage(), t.storage());
  EXPECT_EQ(c.to_vector(), (std::vector<double>{0, 3, 10, 4, 2, 5}));
}

TEST(Tensor, DtypeConversionsRoundTrip) {
  Tensor t = Tensor::from_vector({1.0, -2.5, 3.25, 1e-3}, {4});
  for (DType d : {DType::kF64, DType::kBF16, DType::kF16}) {
    Tensor back = t.to(d).to(DType::kF32);
    EXPECT_LT(testing::relative_error(back, t), d == DType::kF64 ? 1e-7 : 1e-2) << dtype_name(d);
  }
  Tensor i = Tensor::from_vector({1.0, 2.0, 3.0}, {3}).to(DType::kI64);
  EXPECT_EQ(i.data<int64_t>()[2], 3);
}

TEST(Tensor, CopyIntoStridedViewAndFill) {
  Tensor t = Tensor::zeros({2, 3});
  Tensor col = t.as_strided({2}, {3}, 1);
  col.copy_(Tensor::from_vector({7, 8}, {2}, DType::kF64));
  EXPECT_EQ(t.to_vector(), (std::vector<double>{0, 7, 0, 0, 8, 0}));
  col.fill_(-1);
  EXPECT_EQ(t.to_vector(), (std::vector<double>{0, -1, 0, 0, -1, 0}));
  add_inplace(col, Tensor::from_vector({2, 3}, {2}), 2.0);
  EXPECT_EQ(t.to_vector(), (std::vector<double>{0, 3, 0, 0, 5, 0}));
}

TEST(Tensor, BadInputsThrowClearly) {
  EXPECT_TRUE(testing::throws_with([] { Tensor::empty({2, -1}); }, {"negative dimension", "[2, -1]"}));
  EXPECT_TRUE(testing::throws_with([] { Tensor::zeros({2, 3}).copy_(Tensor::zeros({3, 2})); }, {"copy_", "[3, 2]"}));
  EXPECT_TRUE(testing::throws_with([] { Tensor::zeros({2}).item(); }, {"item()", "f32[2]"}));
  EXPECT_TRUE(testing::throws_with([] { parse_device("gpu"); }, {"unknown device 'gpu'"}));
#if !VITDDP_WITH_CUDA
  EXPECT_TRUE(testing::throws_with([] { Tensor::zeros({2}, DType::kF32, Device::cuda(0)); }, {"no CUDA backend"}));
#endif
}

}  // namespace
}  // namespace vitddp
