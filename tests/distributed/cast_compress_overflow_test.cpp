// The fp16 hook never turns a finite gradient into Inf silently (Note [Compression overflow]):
// a step whose values overflowed fp16 (one rank's share after the division by the world size,
// or the sum) is explained on every rank, and only that step; a NaN or Inf that a rank brought
// is not; bf16 keeps fp32's range. Two Gloo ranks in forked processes, then
// `train --procs 2 --hook fp16` with weights that make the gradients huge.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/gloo_ranks.h"
#include "common/multiprocess.h"
#include "common/train_process.h"
#include "distributed/comm_hook.h"
#include "distributed/process_group.h"
#include "framework/io/safetensors.h"

namespace vitddp {
namespace {


GradBucket one_bucket(std::vector<double> values) {
  GradBucket b;
  b.params = {0};
  b.offsets = {0};
  b.shapes = {{static_cast<int64_t>(values.size())}};
  b.buffer = Tensor::from_vector(values, {static_cast<int64_t>(values.size())}, DType::kF32);
  b.is_last = true;
  return b;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Runs `body(rank, group)` on two Gloo ranks; every rank must return 0.
void two_ranks(const std::function<int(int, ProcessGroup&)>& body) {
  testing::run_on_gloo_ranks(2, "cast_overflow", body);
}

TEST(CastCompressOverflow, EveryRankExplainsTheStepsThatOverflowed) {
  if (!has_gloo_backend()) GTEST_SKIP() << "this build has no Gloo";
  two_ranks([](int rank, ProcessGroup& group) {
    auto hook = make_cast_compress_hook(DType::kF16);
    auto run = [&](std::vector<double> values) {
      GradBucket b = one_bucket(std::move(values));
      hook->run(group, b)->wait();
      return b.buffer.to_vector();
    };
    // Step 0: rank 0's 2e5 is 1e5 > 65504 after the division by 2: Inf in its cast.
    std::vector<double> v = run({rank == 0 ? 2e5 : 1.0, 1.0, 3.0});
    VITDDP_CHILD_CHECK(std::isinf(v[0]) && v[1] == 1.0 && v[2] == 3.0, v[0], " ", v[1], " ", v[2]);
    // Step 1: each rank's share, 65000, fits; their sum does not.
    v = run({1.3e5, 1.0});
    VITDDP_CHILD_CHECK(std::isinf(v[0]) && v[1] == 1.0, v[0], " ", v[1]);
    // Step 2: everything fits, but rank 1 has a NaN and an Inf of its own: not the hook's doing.
    v = run({rank == 0 ? 1.3e5 : 1.0, rank == 1 ? std::nan("") : 1.0, rank == 1 ? -INFINITY : 2.0});
    VITDDP_CHILD_CHECK(std::fabs(v[0] - 65000.5) < 40 && std::isnan(v[1]) && std::isnan(v[2]), v[0], " ", v[1], " ",
                       v[2]);
    for (int64_t step : {0, 1}) {
      const std::string why = hook->explain_nonfinite(step);
      VITDDP_CHILD_CHECK(contains(why, "the fp16 hook turned finite gradients into Inf"), step, ": ", why);
      VITDDP_CHILD_CHECK(contains(why, "65504") && contains(why, "--hook bf16"), why);
    }
    VITDDP_CHILD_CHECK(hook->explain_nonfinite(2).empty(), hook->explain_nonfinite(2));
    VITDDP_CHILD_CHECK(hook->explain_nonfinite(3).empty(), hook->explain_nonfinite(3));  // not run yet
    return 0;
  });
}

TEST(CastCompressOverflow, Bf16HasFp32Range) {
  if (!has_gloo_backend()) GTEST_SKIP() << "this build has no Gloo";
  two_ranks([](int rank, ProcessGroup& group) {
    auto hook = make_cast_compress_hook(DType::kBF16);
    GradBucket b = one_bucket({2e5, 1e30, -4.0});
    hook->run(group, b)->wait();
    std::vector<double> v = b.buffer.to_vector();
    VITDDP_CHILD_CHECK(std::fabs(v[0] / 2e5 - 1) < 1e-2 && std::fabs(v[1] / 1e30 - 1) < 1e-2 && v[2] == -4.0, v[0],
                       " ", v[1], " ", v[2]);
    VITDDP_CHILD_CHECK(hook->explain_nonfinite(0).empty(), hook->explain_nonfinite(0));
    return 0;
  });
}

// End to end: a classification head of +-1e6 makes the encoder's gradients far beyond fp16's
// range while every rank's own gradients stay finite; the run stops (exit 5) and says why.
TEST(CastCompressOverflow, TrainSaysTheFp16HookOverflowed) {
  testing::TempFolder dir("vitddp_cast_overflow_train");
  const std::string base = dir.path() + "/base.safetensors", huge = dir.path() + "/huge.safetensors";
  const std::string tiny = "--model vit_tiny --batch-size 4 --set workers=1 --print-every 0 --optimizer sgd --lr 0";
  testing::TrainOutcome o = testing::run_train("", tiny + " --steps 1 --save " + base);
  ASSERT_EQ(o.code, 0) << o.out;
  SafetensorsFile w = read_safetensors(base);
  std::mt19937 gen(3);
  bool found = false;
  for (auto& [name, t] : w.tensors) {
    if (name != "heads.head.weight") continue;
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = gen() % 2 ? 1e6f : -1e6f;
    found = true;
  }
  ASSERT_TRUE(found);
  write_safetensors(huge, w.tensors);
  o = testing::run_train("", "--procs 2 --hook fp16 --steps 2 --init-from " + huge + " " + tiny);
  EXPECT_EQ(o.code, 5) << o.out;
  EXPECT_TRUE(contains(o.out, "the fp16 hook turned finite gradients into Inf")) << o.out;
  // bf16 carries the same gradients.
  o = testing::run_train("", "--procs 2 --hook bf16 --steps 2 --init-from " + huge + " " + tiny);
  EXPECT_EQ(o.code, 0) << o.out;
}

}  // namespace
}  // namespace vitddp
