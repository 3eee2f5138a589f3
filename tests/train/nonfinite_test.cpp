// Numeric faults: a NaN/Inf gradient stops the run with exit code 5 naming the step, rank and
// parameter, or with --nonfinite skip the step's update is not applied; the same decision on
// every rank.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <limits>

#include "common/test_utils.h"
#include "common/train_process.h"
#include "framework/io/safetensors.h"
#include "framework/nn/param_arena.h"
#include "framework/optim/nonfinite.h"
#include "framework/optim/optimizer.h"

namespace vitddp {
namespace {

std::pair<int, std::string> run(const std::string& env, const std::string& args) {
  testing::TrainOutcome o = testing::run_train(env, args);
  return {o.code, o.out};
}

const std::string kTiny = "--model vit_tiny --batch-size 4 --set workers=1 --steps 4";

TEST(Nonfinite, CheckFindsTheFirstBadElementAndTheOptimizerSkips) {
  Tensor a = Tensor::from_vector({1, 2, 3}, {3}).set_requires_grad(true);
  Tensor b = Tensor::from_vector({4, 5}, {2}).set_requires_grad(true);
  ParamArena arena({{"a", a}, {"b", b}}, Device::cpu());
  NonfiniteCheck check(arena);
  auto sgd = make_sgd(arena, SgdConfig{1.0, 0.0, 0.0});
  sgd->set_skip_flag(check.flag());
  a.grad().fill_(1.0);
  check.run();
  EXPECT_EQ(check.flag().data<int64_t>()[0], kNoNonfinite);
  a.grad().data<float>()[1] = std::nanf("");
  check.run();
  const int64_t bad = check.flag().data<int64_t>()[0];
  EXPECT_EQ(bad, arena.offset_of(0) + 1);
  EXPECT_EQ(check.parameter_at(bad), "a");
  sgd->step();
  EXPECT_EQ(a.to_vector(), (std::vector<double>{1, 2, 3}));  // not applied
}

// Note [The non-finite scan in the update]: under --nonfinite stop the update itself reports
// the first bad element, and is applied (the run stops before the weights are used).
TEST(Nonfinite, TheUpdateReportsTheFirstBadElement) {
  for (const char* name : {"sgd", "adamw"}) {
    SCOPED_TRACE(name);
    Tensor a = Tensor::from_vector({1, 2, 3}, {3}).set_requires_grad(true);
    Tensor b = Tensor::from_vector({4, 5}, {2}).set_requires_grad(true);
    ParamArena arena({{"a", a}, {"b", b}}, Device::cpu());
    Tensor flag = Tensor::zeros({1}, DType::kI64, Device::cpu());
    auto optimizer = std::string(name) == "sgd" ? make_sgd(arena, SgdConfig{1.0, 0.0, 0.0}) : make_adamw(arena, AdamWConfig{});
    optimizer->set_nonfinite_report(flag);
    a.grad().fill_(1.0);
    b.grad().fill_(1.0);
    optimizer->step();
    EXPECT_EQ(flag.data<int64_t>()[0], kNoNonfinite);
    EXPECT_LT(a.to_vector()[0], 1.0);  // applied
    a.grad().data<float>()[2] = std::numeric_limits<float>::infinity();
    a.grad().data<float>()[1] = std::nanf("");
    const double before = a.to_vector()[0];
    optimizer->step();
    EXPECT_EQ(flag.data<int64_t>()[0], arena.offset_of(0) + 1);
    EXPECT_LT(a.to_vector()[0], before);  // applied all the same
    EXPECT_TRUE(std::isnan(a.to_vector()[1]));
  }
}

TEST(Nonfinite, StopsWithExitCodeFiveNamingStepAndParameter) {
  auto [code, out] = run("VITDDP_FAULT=0:1:nan", kTiny);
  EXPECT_EQ(code, 5) << out;
  EXPECT_NE(out.find("step 2 (rank 0): non-finite gradient in "), std::string::npos) << out;
  EXPECT_NE(out.find("the run stops before anything of this step is saved"), std::string::npos) << out;
}

TEST(Nonfinite, SkipLeavesTheWeightsFinite) {
  auto dir = std::filesystem::temp_directory_path() / ("vitddp_nonfinite_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string saved = (dir / "w.safetensors").string();
  auto [code, out] = run("VITDDP_FAULT=0:1:nan", kTiny + " --nonfinite skip --json --save " + saved);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("step 2 (rank 0): non-finite gradient in "), std::string::npos) << out;
  EXPECT_NE(out.find("the update was not applied: step skipped"), std::string::npos) << out;
  const nlohmann::json j = testing::json_line(out);
  EXPECT_EQ(j["skipped_steps"], 1) << out;
  EXPECT_EQ(j["losses"].size(), 4u) << out;  // the skipped step is reported like the others
  for (auto& [name, t] : read_safetensors(saved).tensors)
    for (double v : t.to_vector()) ASSERT_TRUE(std::isfinite(v)) << name;
  std::filesystem::remove_all(dir);
}

TEST(Nonfinite, EveryRankDecidesTheSame) {
  // A NaN on rank 1 reaches every rank through the all-reduce.
  auto [code, out] = run("VITDDP_FAULT=1:1:nan", "--procs 2 " + kTiny);
  EXPECT_EQ(code, 5) << out;
  EXPECT_NE(out.find("step 2 (rank "), std::string::npos) << out;
  auto [skip_code, skip_out] = run("VITDDP_FAULT=1:1:nan", "--procs 2 --nonfinite skip --json " + kTiny);
  EXPECT_EQ(skip_code, 0) << skip_out;
  // Rank 0, whose own gradients were finite, skipped the step too.
  EXPECT_NE(skip_out.find("step 2 (rank 0): non-finite gradient in "), std::string::npos) << skip_out;
  const nlohmann::json j = testing::json_line(skip_out);
  EXPECT_EQ(j["skipped_steps"], 1) << skip_out;
  EXPECT_EQ(j["world_size"], 2) << skip_out;
}

TEST(Nonfinite, BadFlagValue) {
  auto [code, out] = run("", kTiny + " --nonfinite ignore");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--nonfinite must be stop or skip"), std::string::npos) << out;
}

}  // namespace
}  // namespace vitddp
