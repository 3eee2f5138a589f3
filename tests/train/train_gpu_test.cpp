// `train --gpus 1` end to end on the GPU: default ViT-L/32 run prints progress and a summary;
// asking for more GPUs than are visible is a clear error that lists them.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>

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
  auto [code, out] = run_train("--gpus 1 --steps 3 --warmup 1");
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("training vit_l_32 (306535400 parameters) on cuda:0"), std::string::npos) << out;
  EXPECT_NE(out.find("step    4/4"), std::string::npos) << out;
  EXPECT_NE(out.find("summary: vit_l_32 on cuda:0"), std::string::npos) << out;
}

TEST(TrainGpu, TooManyGpusListsTheVisibleOnes) {
  VITDDP_REQUIRE_GPU();
  auto [code, out] = run_train("--gpus 64 --steps 1");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--gpus 64 asked for but"), std::string::npos) << out;
  EXPECT_NE(out.find("0: NVIDIA"), std::string::npos) << out;
}

}  // namespace
}  // namespace vitddp
