// `train --cuda-graph` (Note [A step as a CUDA graph]): the third step is captured and every
// later one replays it; the weights after the run are those of the eager run, bit for bit, on
// one GPU and over NCCL on two (the bucket collectives inside the graph), and steps the graph
// cannot replay (a short last batch, a setting that changes the step's work) run eagerly.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/ddp_harness.h"
#include "common/multiprocess.h"
#include "common/run_checks.h"
#include "common/train_process.h"
#include "framework/io/safetensors.h"

namespace vitddp {
namespace {

// Trains `args` eagerly (--cuda-graph=false) and with --cuda-graph; both must finish, the graph run must say it
// captured step 3 and replayed `replays` steps, and the weights must agree bit for bit. Returns
// the graph run's output.
std::string expect_graph_matches_eager(const std::string& args, const std::string& dir_name, int replays,
                                       int captured_step = 3) {
  testing::TempFolder dir(dir_name);
  const std::string eager = (dir / "eager.safetensors").string(), graphed = (dir / "graph.safetensors").string();
  testing::TrainOutcome a =
      testing::run_train("", args + " --cuda-graph=false --json --save " + eager, /*use_gpus=*/true, 300);
  EXPECT_EQ(a.code, 0) << a.out;
  EXPECT_TRUE(a.json()["cuda_graph_replays"].is_null()) << a.out;
  testing::TrainOutcome b =
      testing::run_train("", args + " --cuda-graph --json --save " + graphed, /*use_gpus=*/true, 300);
  EXPECT_EQ(b.code, 0) << b.out;
  EXPECT_NE(b.out.find("cuda graph: step " + std::to_string(captured_step) + " captured ("), std::string::npos)
      << b.out;
  EXPECT_EQ(b.json()["cuda_graph_replays"], replays) << b.out;
  if (a.code == 0 && b.code == 0) EXPECT_EQ(testing::worst_weight_difference(eager, graphed), 0.0);
  std::istringstream lines(b.out);  // the graph's own lines, into the test log
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("cuda graph:", 0) == 0) std::cout << line << "\n";
  return b.out;
}

// The number of kernels the captured graph runs at their stream's higher priority.
int prioritized_kernels(const std::string& out) {
  const size_t at = out.find(" nodes, ");
  return at == std::string::npos ? -1 : std::stoi(out.substr(at + 8));
}

// Products chosen by cuBLASLt's heuristic, not by timing: the same in both runs.
const std::string kBase = "--set timeout=60 --model vit_tiny --batch-size 32 --steps 6 --print-every 0 "
                          "--set gemm-autotune=false";

TEST(CudaGraphGpu, OneGpuReplaysGiveTheEagerWeights) {
  if (testing::gpus_without_cuda_init() < 1) GTEST_SKIP() << "needs a GPU";
  for (const char* precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    expect_graph_matches_eager(kBase + " --data gpu --precision " + precision + " --optimizer adamw",
                               "vitddp_graph_1gpu", 3);
  }
}

// The training recipe under the graph: the schedule's rate, AdamW's bias corrections and the
// clip's scale reach the update through device memory (framework/optim/step_constants.h), the
// EMA and the decay mask ride in the update's pass; one rank's sharded updates clip inside the
// graph (the norm's all-reduce captured with the step).
TEST(CudaGraphGpu, TheRecipeReplaysGiveTheEagerWeights) {
  if (testing::gpus_without_cuda_init() < 1) GTEST_SKIP() << "needs a GPU";
  const std::string recipe = " --data gpu --lr 0.01 --lr-schedule cosine --warmup-steps 2 --label-smoothing 0.1 "
                             "--clip-grad-norm 0.05 --model-ema 0.9 --weight-decay 0.05";
  for (const char* precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    expect_graph_matches_eager(kBase + recipe + " --optimizer adamw --precision " + precision, "vitddp_graph_recipe", 3);
  }
  for (const char* optimizer : {"sgd --momentum 0.9", "adamw"}) {
    SCOPED_TRACE(optimizer);
    expect_graph_matches_eager("--gpus 1 --set ddp=true " + kBase + recipe + " --precision bf16 --bucket-mb 0.5 "
                               "--set update=sharded --optimizer " + optimizer, "vitddp_graph_recipe_sharded", 3);
  }
}

TEST(CudaGraphGpu, DdpReplaysCarryTheBucketCollectives) {
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  // Small buckets: many collectives inside the graph, launched as backward goes.
  const std::string out = expect_graph_matches_eager(
      "--gpus 2 " + kBase + " --data gpu --bucket-mb 0.05 --precision fp32 --momentum 0.9", "vitddp_graph_ddp_fp32", 3);
  // NCCL's kernels, captured from the high-priority comm stream, keep that priority in the graph.
  EXPECT_GT(prioritized_kernels(out), 0) << out;
  expect_graph_matches_eager("--gpus 2 " + kBase + " --data gpu --bucket-mb 0.5 --precision bf16 --hook bf16",
                             "vitddp_graph_ddp_bf16", 3);
}

// PowerSGD in the graph: the compression on its side stream, the P and Q all-reduces, the
// expansion into the buckets. The capture waits for the hook to be steady: with
// --powersgd-start-iter 1 the second step is the first compressed one and the third is captured;
// with the default 2, the fourth. In place (--nonfinite stop) and staged (skip), f32 and bf16
// errors; rank 4 takes the expansion's rows kernel.
TEST(CudaGraphGpu, PowerSgdReplaysGiveTheEagerWeights) {
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const std::string psgd = "--gpus 2 " + kBase + " --data gpu --bucket-mb 0.5 --precision bf16 --hook powersgd "
                           "--powersgd-rank 4 --momentum 0.9";
  expect_graph_matches_eager(psgd + " --powersgd-start-iter 1", "vitddp_graph_psgd", 3);
  // Tiny buckets: the last may hold no matrix at all (the class token), and the hook is steady all the same.
  expect_graph_matches_eager("--gpus 2 " + kBase + " --data gpu --bucket-mb 0.01 --precision bf16 --hook powersgd "
                             "--powersgd-rank 4 --momentum 0.9 --powersgd-start-iter 1",
                             "vitddp_graph_psgd_tiny", 3);
  expect_graph_matches_eager(psgd + " --powersgd-start-iter 1 --nonfinite skip --set powersgd-error-dtype=bucket",
                             "vitddp_graph_psgd_skip", 3);
  expect_graph_matches_eager(psgd, "vitddp_graph_psgd_later", 2, /*captured_step=*/4);
}

// One rank (ddp) on one GPU, where two are not at hand: the error settled a step late, its sent P
// committed in the graph (staged and in place); and rank 1, whose products are matrix products,
// settled eagerly.
TEST(CudaGraphGpu, OneRankPowerSgdReplaysGiveTheEagerWeights) {
  if (testing::gpus_without_cuda_init() < 1) GTEST_SKIP() << "needs a GPU";
  const std::string psgd = "--gpus 1 --set ddp=true " + kBase + " --data gpu --bucket-mb 0.5 --precision bf16 --hook powersgd "
                           "--powersgd-rank 4 --momentum 0.9 --powersgd-start-iter 1 --set powersgd-error-dtype=bucket";
  const std::string in_place = expect_graph_matches_eager(psgd, "vitddp_graph_psgd_one", 3);
  const std::string staged = expect_graph_matches_eager(psgd + " --nonfinite skip", "vitddp_graph_psgd_one_skip", 3);
  for (const std::string& out : {in_place, staged}) {
    EXPECT_NE(out.find(" with the error settled a step late"), std::string::npos) << out;
    EXPECT_EQ(out.find(", 0 with the error settled a step late"), std::string::npos) << out;
  }
  const std::string eager =
      expect_graph_matches_eager(psgd + " --powersgd-rank 1", "vitddp_graph_psgd_one_eager", 3);
  EXPECT_NE(eager.find(", 0 with the error settled a step late"), std::string::npos) << eager;
}

// A NaN injected into one rank's loss travels through the graph like any other: every rank still
// replays that step (NCCL needs the same collectives captured on every rank), and --nonfinite
// decides, in a replay as in the captured step itself.
TEST(CudaGraphGpu, ANanInOneRanksLossIsReplayedOnEveryRank) {
  if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const std::string args = "--gpus 2 " + kBase + " --data gpu --bucket-mb 0.5 --cuda-graph";
  testing::TrainOutcome skip =
      testing::run_train("VITDDP_FAULT=1:4:nan", args + " --nonfinite skip --json", /*use_gpus=*/true, 300);
  ASSERT_EQ(skip.code, 0) << skip.out;
  EXPECT_NE(skip.out.find("step 5 (rank 0): non-finite gradient in "), std::string::npos) << skip.out;
  EXPECT_EQ(skip.json()["skipped_steps"], 1) << skip.out;
  EXPECT_EQ(skip.json()["cuda_graph_replays"], 3) << skip.out;
  testing::TrainOutcome stop = testing::run_train("VITDDP_FAULT=1:2:nan", args, /*use_gpus=*/true, 300);
  EXPECT_EQ(stop.code, 5) << stop.out;
  EXPECT_NE(stop.out.find("cuda graph: step 3 captured"), std::string::npos) << stop.out;
  EXPECT_NE(stop.out.find("step 3 (rank 0): non-finite gradient in "), std::string::npos) << stop.out;
}

// A dataset of 112 images in batches of 32: every fourth step has 16, which runs eagerly between
// replays (step 3, captured, has 32; step 4 has 16; steps 5 and 6, of the next epoch, replay).
TEST(CudaGraphGpu, AShortBatchRunsEagerlyBetweenReplays) {
  if (testing::gpus_without_cuda_init() < 1) GTEST_SKIP() << "needs a GPU";
  const std::string out = expect_graph_matches_eager(
      kBase + " --data synthetic --set dataset-size=112 --set workers=1 --precision fp32", "vitddp_graph_short", 2);
  EXPECT_EQ(out.find("cuda graph: off"), std::string::npos) << out;
}

TEST(CudaGraphGpu, ASettingItCannotReplaySaysWhyAndTrainsEagerly) {
  if (testing::gpus_without_cuda_init() < 1) GTEST_SKIP() << "needs a GPU";
  testing::TrainOutcome o =
      testing::run_train("", kBase + " --data gpu --dropout 0.1 --steps 3 --cuda-graph", /*use_gpus=*/true, 300);
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("cuda graph: off, every step runs eagerly: --dropout"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("captured"), std::string::npos) << o.out;
}

// Checkpoints written between replays, and a resumed run (which captures anew at its own third
// step), give the weights of the uninterrupted graph run, on one GPU and on two (where two are at
// hand); --op-breakdown's extra steps run eagerly after the replays.
TEST(CudaGraphGpu, CheckpointsBetweenReplaysResumeExactly) {
  if (testing::gpus_without_cuda_init() < 1) GTEST_SKIP() << "needs a GPU";
  // PowerSGD: each replay advances the hook's step count, which the checkpoints record.
  for (const std::string gpus : {"", "--gpus 2 --bucket-mb 0.05 ",
                                 "--gpus 2 --bucket-mb 0.05 --hook powersgd --powersgd-start-iter 1 "}) {
    SCOPED_TRACE(gpus);
    if (!gpus.empty() && testing::gpus_without_cuda_init() < 2) continue;  // the two-GPU cases
    testing::TempFolder dir("vitddp_graph_resume");
    const std::string straight = (dir / "straight.safetensors").string();
    const std::string resumed = (dir / "resumed.safetensors").string();
    const std::string ckpt = (dir / "ckpt").string();
    const std::string args = gpus + kBase + " --data gpu --optimizer adamw --cuda-graph";
    testing::TrainOutcome a =
        testing::run_train("", args + " --steps 10 --save " + straight, /*use_gpus=*/true, 300);
    ASSERT_EQ(a.code, 0) << a.out;
    testing::TrainOutcome b = testing::run_train(
        "", args + " --steps 7 --checkpoint-dir " + ckpt + " --checkpoint-every 3 --json", /*use_gpus=*/true, 300);
    ASSERT_EQ(b.code, 0) << b.out;
    EXPECT_EQ(b.json()["cuda_graph_replays"], 4) << b.out;
    if (gpus.find("powersgd") != std::string::npos) {  // steps 1 to 6 communicated: 6
      const nlohmann::json record = nlohmann::json::parse(testing::file_bytes(ckpt + "/step-000006/rank-0.json"));
      EXPECT_EQ(record["powersgd"]["iter"], 6) << record.dump();
    }
    testing::TrainOutcome c = testing::run_train(
        "", args + " --steps 10 --resume --checkpoint-dir " + ckpt + " --save " + resumed + " --op-breakdown --json",
        /*use_gpus=*/true, 300);
    ASSERT_EQ(c.code, 0) << c.out;
    EXPECT_EQ(c.json()["first_step"], 7) << c.out;  // resumed from step 6
    EXPECT_NE(c.out.find("cuda graph: step 9 captured"), std::string::npos) << c.out;
    EXPECT_FALSE(c.json()["op_breakdown"].empty()) << c.out;
    EXPECT_EQ(testing::worst_weight_difference(straight, resumed), 0.0);
  }
}

}  // namespace
}  // namespace vitddp
