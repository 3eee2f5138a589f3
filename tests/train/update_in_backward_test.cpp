// `train --update-in-backward` (Note [Updates in backward]) over 2 Gloo ranks: the same weights,
// bit for bit, as the plain update (SGD with momentum, AdamW, gradient accumulation, gradients
// copied into buckets, one bucket, unused parameters searched), checkpoints that resume exactly,
// a NaN that still stops the run at its step, and bad combinations refused before anything
// starts.
#include <gtest/gtest.h>


#include "common/multiprocess.h"
#include "common/run_checks.h"
#include "common/test_utils.h"
#include "common/train_process.h"

namespace vitddp {
namespace {

using testing::kTwoTinyGlooRanks;
using Outcome = testing::TrainOutcome;

TEST(UpdateInBackward, GivesTheWeightsOfThePlainUpdate) {
  for (const std::string& setting : {std::string("--momentum 0.9 --weight-decay 0.01"),
                                     std::string("--optimizer adamw --lr 0.01 --weight-decay 0.05"),
                                     std::string("--momentum 0.9 --accumulate 2"),
                                     std::string("--momentum 0.9 --grad-as-bucket-view=false"),
                                     std::string("--momentum 0.9 --find-unused-parameters"),
                                     std::string("--momentum 0.9 --bucket-mb 100"),
                                     // Expanded into each bucket on the update stream's turn.
                                     std::string("--momentum 0.9 --hook powersgd --powersgd-start-iter 1")}) {
    SCOPED_TRACE(setting);
    const Outcome updated =
        testing::expect_flags_keep_the_bytes(kTwoTinyGlooRanks + " --steps 4 " + setting, "--update-in-backward",
                                             "vitddp_uib");
    EXPECT_NE(updated.out.find(", updates in backward"), std::string::npos) << updated.out;
    // Steps 2 to 4 update all but their last bucket beside backward (step 1 may rebuild).
    EXPECT_GE(testing::updates_issued_beside_backward(updated.out),
              setting.find("--bucket-mb 100") == std::string::npos ? 3 : 0)
        << updated.out;
  }
}

TEST(UpdateInBackward, CheckpointsResumeExactly) {
  testing::expect_checkpoints_resume_exactly(kTwoTinyGlooRanks + " --momentum 0.9 --update-in-backward",
                                             "vitddp_uib_ckpt");
}

// In the first step (updated after backward) and in later ones (in backward), the last too.
TEST(UpdateInBackward, ANanStillStopsTheRunAtItsStep) {
  for (const auto& [fault, step] : {std::pair<std::string, std::string>{"1:0:nan", "1"}, {"0:2:nan", "3"},
                                    {"1:3:nan", "4"}}) {
    Outcome o = testing::run_train("VITDDP_FAULT=" + fault, kTwoTinyGlooRanks + " --steps 4 --update-in-backward");
    EXPECT_EQ(o.code, 5) << fault << ": " << o.out;
    EXPECT_NE(o.out.find("step " + step + " (rank 0): non-finite gradient in "), std::string::npos)
        << fault << ": " << o.out;
  }
}

TEST(UpdateInBackward, BadCombinationsAreOneLineAndExitTwo) {
  for (auto [args, message] :
       {std::pair<std::string, std::string>{"--procs 2 --update-in-backward --nonfinite skip",
                                            "--nonfinite skip needs them all first"},
        {"--procs 2 --update-in-backward --update-in-forward", "choose one"},
        {"--procs 2 --update-in-backward --hook bf16", "--hook bf16 on f32 buckets communicates"},
        {"--update-in-backward", "--update-in-backward updates DDP's buckets as their communication ends: it needs "
                                 "data parallelism"}}) {
    testing::expect_refused_in_one_line(args + " --model vit_tiny --batch-size 4 --workers 1 --warmup 0 --steps 1", message);
  }
}

}  // namespace
}  // namespace vitddp
