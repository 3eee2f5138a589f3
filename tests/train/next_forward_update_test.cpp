// The expert key update next-forward (Note [Updates in the next forward]) over 2 Gloo ranks: the same
// weights, bit for bit, as the plain update (SGD with momentum, AdamW, gradient accumulation,
// gradients copied into buckets, first layers' buckets sent first, held buckets sent last), checkpoints that resume
// exactly, a NaN that still stops the run at its step, and bad combinations refused before
// anything starts.
#include <gtest/gtest.h>


#include "common/multiprocess.h"
#include "common/run_checks.h"
#include "common/test_utils.h"
#include "common/train_process.h"

namespace vitddp {
namespace {

using testing::kTwoTinyGlooRanks;
using Outcome = testing::TrainOutcome;

TEST(NextForwardUpdateCli, GivesTheWeightsOfThePlainUpdate) {
  for (const std::string& setting : {std::string("--momentum 0.9 --weight-decay 0.01"),
                                     std::string("--optimizer adamw --lr 0.01 --weight-decay 0.05"),
                                     std::string("--momentum 0.9 --accumulate 2"),
                                     std::string("--momentum 0.9 --set grad-as-bucket-view=false")}) {
    SCOPED_TRACE(setting);
    for (const std::string& mode : {std::string("--set update=next-forward"),
                                    std::string("--set update=next-forward --set ready-order-share=0.3"),
                                    std::string("--set update=next-forward --set ready-order-share=0.3 --set held-buckets=1")}) {
      SCOPED_TRACE(mode);
      testing::expect_flags_keep_the_bytes(kTwoTinyGlooRanks + " --steps 4 " + setting, mode, "vitddp_uif");
    }
  }
}

// A checkpoint holds the step's update though it was still pending when the step ended.
TEST(NextForwardUpdateCli, CheckpointsResumeExactly) {
  for (const std::string held : {"0", "2"}) {
    SCOPED_TRACE("held " + held);
    testing::expect_checkpoints_resume_exactly(
        kTwoTinyGlooRanks + " --momentum 0.9 --set update=next-forward --set ready-order-share=0.3 --set held-buckets=" + held,
        "vitddp_uif_ckpt");
  }
}

// The start line says how the buckets go: in ready order, after backward, and the held ones last
// (at most all but the first).
TEST(NextForwardUpdateCli, TheStartLineNamesTheLaunchOrder) {
  Outcome o = testing::run_train("", kTwoTinyGlooRanks + " --steps 1 --set update=next-forward --set ready-order-share=0.3 "
                                                         "--set held-buckets=2");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find(" buckets launched in ready order and the rest after backward, the first layers' first, then "
                       "the 2 held buckets last\n"),
            std::string::npos)
      << o.out;
  o = testing::run_train("", kTwoTinyGlooRanks + " --steps 1 --set update=next-forward --set ready-order-share=0.3 "
                                                 "--set held-buckets=1000");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find(", 1 buckets launched in ready order, the "), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("the first layers' first"), std::string::npos) << o.out;
}

TEST(NextForwardUpdateCli, ANanStillStopsTheRunAtItsStep) {
  Outcome o = testing::run_train("VITDDP_FAULT=1:1:nan", kTwoTinyGlooRanks + " --steps 4 --set update=next-forward");
  EXPECT_EQ(o.code, 5) << o.out;
  EXPECT_NE(o.out.find("step 2 (rank 0): non-finite gradient in "), std::string::npos) << o.out;
  // And at the last step, whose updates are applied only after the loop.
  o = testing::run_train("VITDDP_FAULT=0:3:nan", kTwoTinyGlooRanks + " --steps 4 --set update=next-forward");
  EXPECT_EQ(o.code, 5) << o.out;
  EXPECT_NE(o.out.find("step 4 (rank 0): non-finite gradient in "), std::string::npos) << o.out;
}

TEST(NextForwardUpdateCli, BadCombinationsAreOneLineAndExitTwo) {
  for (auto [args, message] :
       {std::pair<std::string, std::string>{"--procs 2 --set ready-order-share=0", "ready-order-share must be in (0, 1]"},
        {"--procs 2 --set ready-order-share=1.5", "ready-order-share must be in (0, 1]"},
        {"--procs 2 --set ready-order-share=0.5", "without update next-forward"},
        {"--procs 2 --set held-buckets=1", "held-buckets 1 sends the last layers' gradients last"},
        {"--procs 2 --set update=next-forward --set held-buckets=1", "it needs ready-order-share below 1"},
        {"--procs 2 --set update=next-forward --set held-buckets=-1", "held-buckets must be in [0, 100000]"},
        {"--procs 2 --set update=next-forward --nonfinite skip", "--nonfinite skip needs them all first"},
        {"--set update=next-forward", "update next-forward places DDP's bucket updates: it needs data parallelism"}}) {
    testing::expect_refused_in_one_line(args + " --model vit_tiny --batch-size 4 --set workers=1 --steps 1", message);
  }
}

}  // namespace
}  // namespace vitddp
