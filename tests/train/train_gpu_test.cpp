// `train --gpus 1` end to end on the GPU: default ViT-L/32 run prints progress and a summary;
// asking for more GPUs than are visible is a clear error that lists them; --op-breakdown prints
// the host-against-GPU line and a table of op types whose times are in the JSON too.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/gpu.h"
#include "common/train_process.h"

namespace vitddp {
namespace {

std::pair<int, std::string> run_train(const std::string& args) {
  testing::TrainOutcome o = testing::run_train("", args, /*use_gpus=*/true, 300);
  return {o.code, o.out};
}

TEST(TrainGpu, OneGpuDefaultsToVitL32) {
  VITDDP_REQUIRE_GPU();
  auto [code, out] = run_train("--gpus 1 --steps 4 --json");
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json j = testing::json_line(out);
  EXPECT_EQ(j["model"], "vit_l_32") << out;
  EXPECT_EQ(j["params"], 306535400) << out;
  EXPECT_EQ(j["device"], "cuda:0") << out;
  EXPECT_EQ(j["losses"].size(), 4u) << out;
  // The graph is captured at the third step; the timing starts after it.
  EXPECT_TRUE(j["config"]["cuda-graph"].get<bool>()) << out;
  EXPECT_EQ(j["timed_steps"], 1) << out;
}

TEST(TrainGpu, TooManyGpusListsTheVisibleOnes) {
  VITDDP_REQUIRE_GPU();
  auto [code, out] = run_train("--gpus 64 --steps 1");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--gpus 64 asked for but"), std::string::npos) << out;
  EXPECT_NE(out.find("0: NVIDIA"), std::string::npos) << out;
}

TEST(TrainGpu, OpBreakdownTimesOpsAndTheHostAgainstTheGpu) {
  VITDDP_REQUIRE_GPU();
  auto [code, out] = run_train("--gpus 1 --model vit_tiny --data gpu --steps 3 --print-every 0 --op-breakdown --json");
  ASSERT_EQ(code, 0) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("one step issued in ([0-9.e+-]+) ms, finished ([0-9.e+-]+) ms")))
      << out;
  const double issued = std::stod(m[1]), finished = std::stod(m[2]);
  EXPECT_GT(issued, 0.0) << out;
  EXPECT_GE(finished, issued) << out;
  const nlohmann::json result = testing::json_line(out);
  ASSERT_TRUE(result.contains("op_breakdown")) << out;
  bool saw_linear = false;
  for (const auto& row : result["op_breakdown"]) {
    EXPECT_GT(row.at("ms").get<double>(), 0.0) << row.dump();
    EXPECT_GT(row.at("calls").get<int64_t>(), 0) << row.dump();
    saw_linear |= row.at("op") == "linear";
  }
  EXPECT_TRUE(saw_linear) << out;
}

}  // namespace
}  // namespace vitddp
