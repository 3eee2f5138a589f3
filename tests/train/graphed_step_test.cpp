// cuda_graph_unsupported: the settings under which --cuda-graph turns itself off, each named.
#include <gtest/gtest.h>

#include "train/config.h"
#include "train/graphed_step.h"

namespace vitddp {
namespace {

TEST(CudaGraph, ThePlainStepTheSixteenBitHooksOnSixteenBitBucketsAndPowerSgdCanBeReplayed) {
  TrainConfig c;
  EXPECT_EQ(cuda_graph_unsupported(c, 3), "");
  c.precision = "bf16";
  for (const char* hook : {"allreduce", "fp16", "bf16", "powersgd"}) {  // PowerSGD: once steady (CommHook)
    c.hook = hook;
    EXPECT_EQ(cuda_graph_unsupported(c, 100), "") << hook;
  }
  c.concurrent_wgrad = false;  // kept by the capture like any other setting of the step
  c.update = "sharded";        // its bucket updates are captured with the step (SGD)
  EXPECT_EQ(cuda_graph_unsupported(c, 100), "");
}

TEST(CudaGraph, EachSettingThatChangesTheStepIsNamed) {
  auto why = [](auto change) {
    TrainConfig c;
    change(c);
    return cuda_graph_unsupported(c, 100);
  };
  EXPECT_NE(why([](TrainConfig& c) { c.accumulate = 2; }).find("--accumulate 2"), std::string::npos);
  EXPECT_NE(why([](TrainConfig& c) { c.update = "next-forward"; }).find("update next-forward"), std::string::npos);
  // Captured updates read their step's constants from device memory: AdamW's bias corrections too.
  EXPECT_EQ(why([](TrainConfig& c) {
              c.update = "sharded";
              c.optimizer = "adamw";
            }),
            "");
  EXPECT_NE(why([](TrainConfig& c) { c.hook = "fp16"; }).find("--hook fp16 on f32 buckets"), std::string::npos);
  EXPECT_NE(why([](TrainConfig& c) { c.find_unused_parameters = true; }).find("find-unused-parameters"),
            std::string::npos);
  EXPECT_NE(why([](TrainConfig& c) { c.dropout = 0.1; }).find("--dropout"), std::string::npos);
  EXPECT_NE(why([](TrainConfig& c) { c.trace = "t.json"; }).find("--trace"), std::string::npos);
  TrainConfig c;
  EXPECT_NE(cuda_graph_unsupported(c, 2).find("the run has 2 step(s)"), std::string::npos);
  // PowerSGD is captured after its first compressed step: with start iteration 2, from the fourth.
  TrainConfig psgd;
  psgd.hook = "powersgd";
  psgd.powersgd_start_iter = 2;
  EXPECT_NE(cuda_graph_unsupported(psgd, 3).find("captured after its first compressed step, at step 4"),
            std::string::npos);
  EXPECT_EQ(cuda_graph_unsupported(psgd, 4), "");
  // Every reason at once, so that one run tells them all.
  c.dropout = 0.1;
  c.accumulate = 4;
  EXPECT_EQ(cuda_graph_unsupported(c, 100),
            "--accumulate 4 (one micro-batch a step is captured); --dropout (each step draws its masks from a counter "
            "kept on the host)");
}

}  // namespace
}  // namespace vitddp
