// The training recipe through `train` (CPU): a run with a cosine schedule, warm-up, label
// smoothing, clipping, weight decay by parameter and a model EMA resumes bit for bit from a
// checkpoint in the middle of its schedule, on one process and on 2 Gloo ranks with sharded
// updates; sharded updates clip to the plain update's weights; what cannot be honoured is
// refused in one line.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/multiprocess.h"
#include "common/parity_python.h"
#include "common/run_checks.h"
#include "common/train_process.h"

namespace vitddp {
namespace {

namespace fs = std::filesystem;
using testing::kTwoTinyGlooRanks;

// The recipe's features, with a clip below vit_tiny's gradient norm so that it bites.
const std::string kRecipe =
    " --optimizer adamw --lr 0.01 --weight-decay 0.05 --lr-schedule cosine --warmup-steps 3 --label-smoothing 0.1 "
    "--clip-grad-norm 0.05 --model-ema 0.9";

// `args` for 10 steps straight, and for 10 with checkpoints every 3 whose newest (step 9) is then
// removed, resumed from step 6: the same weights and EMA, byte for byte, in the middle of the
// schedule (the resumed run's --steps, hence its schedule, is the interrupted run's).
void expect_resume_mid_schedule(const std::string& args) {
  testing::TempFolder dir("vitddp_recipe");
  const std::string straight = (dir / "straight.safetensors").string();
  const std::string resumed = (dir / "resumed.safetensors").string();
  const std::string ckpt = (dir / "ckpt").string();
  const testing::TrainOutcome a = testing::run_train("", args + " --steps 10 --json --save " + straight);
  ASSERT_EQ(a.code, 0) << a.out;
  EXPECT_GT(a.json()["grad_norm"].get<double>(), 0.05) << "the clip must bite: " << a.out;
  const testing::TrainOutcome b =
      testing::run_train("", args + " --steps 10 --checkpoint-dir " + ckpt + " --checkpoint-every 3");
  ASSERT_EQ(b.code, 0) << b.out;
  fs::remove_all(ckpt + "/step-000009");
  const testing::TrainOutcome c =
      testing::run_train("", args + " --steps 10 --resume --json --checkpoint-dir " + ckpt + " --save " + resumed);
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_EQ(c.json()["first_step"], 7) << c.out;
  EXPECT_EQ(c.out.find("warning: resuming"), std::string::npos) << c.out;
  EXPECT_FALSE(testing::file_bytes(straight).empty());
  EXPECT_EQ(testing::file_bytes(straight), testing::file_bytes(resumed)) << "weights";
  const std::string straight_ema = (dir / "straight.ema.safetensors").string();
  EXPECT_FALSE(testing::file_bytes(straight_ema).empty()) << a.out;
  EXPECT_EQ(testing::file_bytes(straight_ema), testing::file_bytes((dir / "resumed.ema.safetensors").string()))
      << "EMA";
  EXPECT_NE(testing::file_bytes(straight_ema), testing::file_bytes(straight)) << "the EMA is not the weights";
}

TEST(RecipeCli, OneProcessResumesMidScheduleBitExact) {
  expect_resume_mid_schedule("--model vit_tiny --batch-size 4 --set workers=2 --set dataset-size=64 --print-every 0" +
                             kRecipe);
}

TEST(RecipeCli, ShardedUpdatesResumeMidScheduleBitExact) {
  expect_resume_mid_schedule(kTwoTinyGlooRanks + kRecipe + " --set update=sharded");
}

// The digits as JPEG files (scripts/make_digits_dataset.py): a folder, and tar shards.
std::string make_digits(const testing::TempFolder& dir) {
  const std::string made = testing::make_digits_dataset(dir.path(), "--shards 3");
  EXPECT_EQ(made.rfind("OK\n", 0), 0u) << made;
  return dir.path();
}

const std::string kMixing = " --mixup-alpha 0.2 --cutmix-alpha 1.0";

// Resumed from step 6 of 10 with batches of 8, the loader is mid-epoch in the file order, the
// random crops and the Mixup/CutMix draws: the weights and EMA come out byte for byte.
TEST(RecipeCli, AJpegFolderWithMixupResumesMidEpochBitExact) {
  VITDDP_REQUIRE_PARITY_PYTHON();
  testing::TempFolder data("vitddp_recipe_digits");
  expect_resume_mid_schedule("--model vit_tiny --batch-size 8 --set workers=3 --print-every 0 --data " +
                             make_digits(data) + "/train" + kRecipe + kMixing);
}

TEST(RecipeCli, TarShardsWithMixupResumeMidEpochBitExactOnTwoRanks) {
  VITDDP_REQUIRE_PARITY_PYTHON();
  testing::TempFolder data("vitddp_recipe_shards");
  expect_resume_mid_schedule("--procs 2 --model vit_tiny --batch-size 8 --set workers=2 --bucket-mb 0.05 "
                             "--print-every 0 --data " + make_digits(data) + "/train-shards" + kRecipe + kMixing);
}

// Note [Clipping sharded updates]: the norm summed over the ranks' parts scales every update as
// the plain update's does.
TEST(RecipeCli, ShardedUpdatesClipToThePlainWeights) {
  const testing::TrainOutcome sharded = testing::expect_flags_keep_the_bytes(
      kTwoTinyGlooRanks + " --steps 4 --momentum 0.9 --clip-grad-norm 0.05 --weight-decay 0.01 --json",
      "--set update=sharded", "vitddp_recipe_shard");
  EXPECT_GT(sharded.json()["grad_norm"].get<double>(), 0.05) << sharded.out;
}

TEST(RecipeCli, TheStartLineSaysTheSchedule) {
  const testing::TrainOutcome o = testing::run_train(
      "", "--model vit_tiny --batch-size 2 --set workers=1 --steps 10 --print-every 0 --optimizer adamw --lr 0.01 "
          "--lr-schedule cosine --warmup-steps 3");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("adamw lr 0.01 cosine to 0 over 7 steps, after 3 linear warm-up steps from 0.0001"),
            std::string::npos)
      << o.out;
}

TEST(RecipeCli, WhatItCannotHonourIsRefused) {
  const std::string tiny = "--model vit_tiny --batch-size 2 --steps 4";
  testing::expect_refused_in_one_line(kTwoTinyGlooRanks + " --steps 2 --clip-grad-norm 1 --set update=next-forward",
                                      "--clip-grad-norm needs every gradient reduced before any update");
  testing::expect_refused_in_one_line(tiny + " --warmup-steps 4", "--warmup-steps must be in [0, --steps 4), got 4");
  testing::expect_refused_in_one_line(tiny + " --lr-schedule linear", "--lr-schedule must be constant, cosine or step");
  testing::expect_refused_in_one_line(tiny + " --model-ema 1", "--model-ema must be 0 (off) or a decay in (0, 1)");
  testing::expect_refused_in_one_line(tiny + " --label-smoothing 1", "--label-smoothing must be in [0, 1)");
  testing::expect_refused_in_one_line(tiny + " --clip-grad-norm -1", "--clip-grad-norm must be >= 0");
  testing::expect_refused_in_one_line(tiny + " --set eval-every=5", "eval-every needs --eval-data");
}

// Resuming with a longer run stretches a cosine schedule: the resume says so.
TEST(RecipeCli, MoreStepsOnACosineScheduleAreNamedOnResume) {
  const testing::TrainOutcome resumed = testing::resume_with_flags(
      "--model vit_tiny --batch-size 2 --set workers=1 --print-every 0 --lr-schedule cosine", "--steps 5",
      "vitddp_recipe_stretch");
  EXPECT_NE(resumed.out.find("--steps 2 -> 5 (the cosine schedule follows --steps)"), std::string::npos)
      << resumed.out;
}

}  // namespace
}  // namespace vitddp
