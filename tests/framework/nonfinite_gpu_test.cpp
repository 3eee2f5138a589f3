// The GPU non-finite scan (vectorised bit test + exact index): the first NaN/Inf of a buffer in
// f32, bf16 and f16, at the start, inside, in the scalar tail, and on a misaligned view; and the
// same answer from the optimizers' update when it reports (Note [The non-finite scan in the
// update]), which must not change the update itself.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "common/gpu.h"
#include "common/test_utils.h"
#include "framework/optim/nonfinite.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/nonfinite.h"
#include "framework/cuda/optimizer.h"
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

// The fused SGD and AdamW updates with a report flag: the scan's answer for every case above (a
// misaligned view takes the kernels' scalar path), and, with finite gradients, weights
// bit-identical to the update without the report.
TEST(NonfiniteGpu, TheUpdateReportsWhatTheScanFinds) {
  VITDDP_REQUIRE_GPU();
#if VITDDP_WITH_CUDA
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const int64_t n = 1000003;
  const std::vector<std::vector<std::pair<int64_t, double>>> cases = {
      {}, {{0, nan}}, {{777777, -inf}, {999999, nan}}, {{999999, nan}, {123457, inf}}, {{n - 1, inf}}};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    std::vector<std::pair<std::string, Tensor>> buffers;
    for (size_t c = 0; c < cases.size(); ++c) buffers.push_back({"case " + std::to_string(c), buffer_with(dtype, n, cases[c])});
    Tensor full = buffer_with(dtype, n + 1, {{5001, nan}});
    buffers.push_back({"misaligned view", full.as_strided({n}, {1}, full.storage_offset() + 1)});
    for (const char* optimizer : {"sgd", "adamw"}) {
      for (const auto& [label, grads] : buffers) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + optimizer + ", " + label);
        Tensor start = buffer_with(DType::kF32, n, {});  // the weights: finite
        Tensor flag = Tensor::zeros({1}, DType::kI64, grads.device());
        StepConstants step;
        step.lr = 0.1f;
        step.step_size = 0.01f;
        step.inv_sqrt_bc2 = 1.0f;
        step.decay = 0.999f;
        Tensor constants = Tensor::zeros({8}, DType::kF32, grads.device());
        cuda::write_step_constants(reinterpret_cast<StepConstants*>(constants.data<float>()), step);
        // The update of elements [begin, end), reporting arena indices (Note [An update in ranges]).
        auto update_range = [&](Tensor master, int64_t* report, Tensor m, Tensor v, int64_t begin, int64_t end) {
          cuda::FlatBuffers b;
          b.master = master.data<float>() + begin;
          b.grads = static_cast<const char*>(grads.data_ptr()) + begin * dtype_size(dtype);
          b.grad_dtype = dtype;
          b.n = end - begin;
          b.report_nonfinite = report;
          b.index_base = begin;
          b.constants = reinterpret_cast<const StepConstants*>(constants.data<float>());
          if (std::string(optimizer) == "sgd")
            cuda::sgd_step(b, m.data<float>() + begin, 0.9f, 0.01f);
          else
            cuda::adamw_step(b, m.data<float>() + begin, v.data<float>() + begin, 0.9f, 0.999f, 1e-8f);
        };
        // One pass, or three ranges in an order other than the arena's.
        auto update = [&](Tensor master, int64_t* report, bool in_ranges) {
          Tensor m = Tensor::zeros({n}, DType::kF32, grads.device()), v = Tensor::zeros({n}, DType::kF32, grads.device());
          cuda::reset_nonfinite_report(report);
          if (!in_ranges) return update_range(master, report, m, v, 0, n);
          for (auto [begin, end] : {std::pair<int64_t, int64_t>{800000, n}, {0, 123456}, {123456, 800000}})
            update_range(master, report, m, v, begin, end);
        };
        Tensor reported = start.clone(), plain = start.clone(), ranged = start.clone();
        update(reported, flag.data<int64_t>(), false);
        update(plain, nullptr, false);
        const int64_t expected = scan(grads);
        EXPECT_EQ(flag.to(Device::cpu()).data<int64_t>()[0], expected);
        if (expected == kNoNonfinite) {
          Tensor a = reported.to(Device::cpu()), b = plain.to(Device::cpu());
          EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0);
        }
        Tensor ranged_flag = Tensor::zeros({1}, DType::kI64, grads.device());
        update(ranged, ranged_flag.data<int64_t>(), true);
        EXPECT_EQ(ranged_flag.to(Device::cpu()).data<int64_t>()[0], expected) << "in ranges";
        Tensor a = ranged.to(Device::cpu()), b = reported.to(Device::cpu());
        EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0) << "in ranges";
      }
    }
  }
#endif
}

}  // namespace
}  // namespace vitddp
