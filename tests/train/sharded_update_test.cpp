// The expert key update sharded (Note [Sharded updates]) over 2 Gloo ranks: each rank updates its part
// of each bucket and the weights are all-gathered, so the saved weights are the plain run's bit
// for bit; a checkpoint holds whole optimizer state (a plain run resumes from it exactly); a NaN
// stops the run at its step; the start line says so; combinations it cannot honour are refused
// in one line.
#include <gtest/gtest.h>

#include "common/multiprocess.h"
#include "common/run_checks.h"
#include "common/train_process.h"

namespace vitddp {
namespace {

using testing::kTwoTinyGlooRanks;

TEST(ShardedUpdateCli, KeepsTheWeights) {
  const testing::TrainOutcome sharded = testing::expect_flags_keep_the_bytes(
      kTwoTinyGlooRanks + " --steps 4 --momentum 0.9 --weight-decay 0.01", "--set update=sharded", "vitddp_shard");
  EXPECT_NE(sharded.out.find(", updates in backward sharded over the 2 ranks"), std::string::npos) << sharded.out;
  // Steps 2 to 4 update their buckets beside backward (the first may rebuild them: after it).
  EXPECT_GE(testing::updates_issued_beside_backward(sharded.out), 3) << sharded.out;
}

// A DDP group of one process: its one part is the whole bucket, gathered in place.
TEST(ShardedUpdateCli, OneRankKeepsTheWeights) {
  const testing::TrainOutcome one = testing::expect_flags_keep_the_bytes(
      "--set ddp=true --device cpu --model vit_tiny --batch-size 4 --set workers=1 --set dataset-size=64 --bucket-mb 0.05 "
      "--print-every 0 --steps 3 --momentum 0.9",
      "--set update=sharded", "vitddp_shard_one");
  EXPECT_NE(one.out.find(", updates in backward sharded over the 1 rank ("), std::string::npos) << one.out;
}

// Each rank's momentum is current only in its own parts until the checkpoint gathers it: a run
// with plain updates resumed from the sharded checkpoint must match a plain run throughout.
TEST(ShardedUpdateCli, ACheckpointHoldsWholeState) {
  testing::TempFolder dir("vitddp_shard_ckpt");
  const std::string args = kTwoTinyGlooRanks + " --momentum 0.9";
  const std::string straight = (dir / "straight.safetensors").string();
  const std::string resumed = (dir / "resumed.safetensors").string();
  const std::string ckpt = (dir / "ckpt").string();
  const testing::TrainOutcome a = testing::run_train("", args + " --steps 6 --save " + straight);
  ASSERT_EQ(a.code, 0) << a.out;
  const testing::TrainOutcome b = testing::run_train(
      "", args + " --steps 4 --set update=sharded --checkpoint-dir " + ckpt + " --checkpoint-every 2");
  ASSERT_EQ(b.code, 0) << b.out;
  const testing::TrainOutcome c =
      testing::run_train("", args + " --steps 6 --resume --checkpoint-dir " + ckpt + " --save " + resumed + " --json");
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_EQ(c.json()["first_step"], 5) << c.out;  // it resumed from the sharded step 4
  EXPECT_EQ(c.json()["steps"], 2) << c.out;
  EXPECT_FALSE(testing::file_bytes(straight).empty());
  EXPECT_EQ(testing::file_bytes(straight), testing::file_bytes(resumed));
}

// A NaN on one rank reaches every rank's parts through the reduce-scatter, and each rank's
// report through the minimum: the run stops at that step, in the step that may rebuild the
// buckets (all-reduced) and in sharded ones.
TEST(ShardedUpdateCli, ANanStopsTheRunAtItsStep) {
  for (const auto& [fault, step] : {std::pair<std::string, std::string>{"1:0:nan", "1"}, {"0:2:nan", "3"},
                                    {"1:3:nan", "4"}}) {
    const testing::TrainOutcome o =
        testing::run_train("VITDDP_FAULT=" + fault, kTwoTinyGlooRanks + " --steps 4 --set update=sharded");
    EXPECT_EQ(o.code, 5) << fault << ": " << o.out;
    EXPECT_NE(o.out.find("step " + step + " (rank 0): non-finite gradient in "), std::string::npos)
        << fault << ": " << o.out;
  }
}

TEST(ShardedUpdateCli, WhatItCannotHonourIsRefused) {
  const std::string base = kTwoTinyGlooRanks + " --steps 1 --set update=sharded";
  testing::expect_refused_in_one_line(base + " --hook fp16", "update sharded reduce-scatters each bucket in place: it "
                                                             "takes --hook allreduce, not --hook fp16");
  testing::expect_refused_in_one_line(base + " --nonfinite skip", "update sharded applies updates before the step's "
                                                                  "gradients have all been scanned");
  testing::expect_refused_in_one_line(base + " --set grad-as-bucket-view=false",
                                      "update sharded updates each bucket's part of the gradient buffer in place: it "
                                      "needs grad-as-bucket-view");
  testing::expect_refused_in_one_line("--model vit_tiny --device cpu --batch-size 4 --steps 1 --set update=sharded",
                                      "update sharded places DDP's bucket updates: it needs data parallelism");
}

}  // namespace
}  // namespace vitddp
