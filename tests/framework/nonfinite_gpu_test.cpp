// The GPU non-finite scan (vectorised bit test + exact index): the first NaN/Inf of a buffer in
// f32, bf16 and f16, at the start, inside, in the scalar tail, and on a misaligned view.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/gpu.h"
#include "common/test_utils.h"
#include "framework/optim/nonfinite.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/nonfinite.h"
#endif

namespace vitddp {
namespace {

#if VITDDP_WITH_CUDA
int64_t scan(const Tensor& grads) {
  Tensor flag = Tensor::zeros({1}, DType::kI64, grads.device());
  cuda::first_nonfinite(grads, flag);
  return flag.to(Device::cpu()).data<int64_t>()[0];
}

// n random values in [-3, 3], then `bad` values written at the given positions (in order).
Tensor buffer_with(DType dtype, int64_t n, const std::vector<std::pair<int64_t, double>>& bad) {
  Generator gen(7);
  Tensor host = testing::random_tensor({n}, gen, DType::kF32, -3.0, 3.0);
  for (auto [i, v] : bad) host.data<float>()[i] = static_cast<float>(v);
  return host.to(dtype).to(Device::cuda(0));
}
#endif

TEST(NonfiniteGpu, FindsTheFirstBadElementInEveryDtypeAndPosition) {
  VITDDP_REQUIRE_GPU();
#if VITDDP_WITH_CUDA
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const int64_t n = 1000003;  // not a multiple of any vector width: a scalar tail
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    EXPECT_EQ(scan(buffer_with(dtype, n, {})), kNoNonfinite);
    EXPECT_EQ(scan(buffer_with(dtype, n, {{0, nan}})), 0);
    EXPECT_EQ(scan(buffer_with(dtype, n, {{777777, -inf}, {999999, nan}})), 777777);
    EXPECT_EQ(scan(buffer_with(dtype, n, {{999999, nan}, {123457, inf}})), 123457);  // the smaller index wins
    EXPECT_EQ(scan(buffer_with(dtype, n, {{n - 1, inf}})), n - 1);                   // in the tail
    // A view one element in: its data pointer is not 16-byte aligned (the scalar path).
    Tensor full = buffer_with(dtype, n, {{5001, nan}});
    Tensor view = full.as_strided({n - 1}, {1}, full.storage_offset() + 1);
    EXPECT_EQ(scan(view), 5000);
  }
#endif
}

}  // namespace
}  // namespace vitddp
