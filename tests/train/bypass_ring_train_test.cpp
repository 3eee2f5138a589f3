// DDP on CPU processes with the straggler-aware ring (--set cpu-allreduce=bypass-ring), one rank
// made slow (VITDDP_SLOW_RANK) so that the bypass is taken: the weights every rank ends with are
// the same bits, and within 1e-5 of a run with Gloo's own all-reduce (the sums are the same, only
// their order of additions differs). Bad settings are refused before anything runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/multiprocess.h"
#include "common/run_checks.h"
#include "common/train_process.h"
#include "framework/io/safetensors.h"
#include "train/config.h"
#include "train/cpu_allreduce_choice.h"

namespace vitddp {
namespace {

const std::string kRun =
    "--procs 3 --steps 4 --model vit_tiny --batch-size 4 --momentum 0.9 --bucket-mb 0.05 --set workers=1 "
    "--print-every 0 --checkpoint-every 4";

// The weights.* tensors of `rank`'s checkpoint at step 4.
NamedTensors weights_of(const std::string& dir, int rank) {
  NamedTensors out;
  for (auto& [name, t] : read_safetensors(dir + "/step-000004/rank-" + std::to_string(rank) + ".safetensors").tensors)
    if (name.rfind("weights.", 0) == 0) out.emplace_back(name, t);
  return out;
}

TEST(BypassRingTrain, RanksAgreeBitForBitAndMatchGlooWithinRounding) {
  testing::TempFolder gloo_dir("vitddp_bypass_gloo"), ring_dir("vitddp_bypass_ring");
  const testing::TrainOutcome gloo = testing::run_train("", kRun + " --checkpoint-dir " + gloo_dir.path());
  ASSERT_EQ(gloo.code, 0) << gloo.out;
  const testing::TrainOutcome ring =
      testing::run_train("VITDDP_SLOW_RANK=1:0.004", kRun + " --checkpoint-dir " + ring_dir.path() +
                                                        " --set cpu-allreduce=bypass-ring --set bypass-wait-ms=0.5");
  ASSERT_EQ(ring.code, 0) << ring.out;

  const NamedTensors r0 = weights_of(ring_dir.path(), 0), g0 = weights_of(gloo_dir.path(), 0);
  ASSERT_GT(r0.size(), 10u);
  ASSERT_EQ(r0.size(), g0.size());
  for (int rank : {1, 2}) {
    const NamedTensors rr = weights_of(ring_dir.path(), rank);
    ASSERT_EQ(rr.size(), r0.size());
    for (size_t i = 0; i < r0.size(); ++i)
      EXPECT_TRUE(rr[i].second.to_vector() == r0[i].second.to_vector()) << r0[i].first << ": rank " << rank << " differs";
  }
  double worst = 0;
  for (size_t i = 0; i < r0.size(); ++i) {
    ASSERT_EQ(r0[i].first, g0[i].first);
    const std::vector<double> a = r0[i].second.to_vector(), b = g0[i].second.to_vector();
    double diff = 0, scale = 0;
    for (size_t k = 0; k < a.size(); ++k) diff = std::max(diff, std::fabs(a[k] - b[k])), scale = std::max(scale, std::fabs(b[k]));
    worst = std::max(worst, diff / std::max(scale, 1e-12));
  }
  std::printf("bypass ring against Gloo's all-reduce: worst relative difference %.3g\n", worst);
  EXPECT_LT(worst, 1e-5);
}

// A rank that hangs (or dies) with the bypass ring under way stops the run within the timeout,
// and the message names it, as with Gloo's own all-reduce.
TEST(BypassRingTrain, AHungOrDeadRankStopsTheRunAndIsNamed) {
  const std::string args = "--procs 3 --steps 5 --model vit_tiny --batch-size 4 --set workers=1 --set timeout=3 "
                           "--set cpu-allreduce=bypass-ring --set bypass-wait-ms=0.5";
  const testing::TrainOutcome hung = testing::run_train("VITDDP_FAULT=1:3:hang", args);
  EXPECT_EQ(hung.code, 4) << hung.out;
  EXPECT_NE(hung.out.find("rank 1 had not reached collective #"), std::string::npos) << hung.out;
  EXPECT_LT(hung.seconds, 3 + 10) << hung.out;
  const testing::TrainOutcome dead = testing::run_train("VITDDP_FAULT=2:2:exit", args);
  EXPECT_NE(dead.code, 0) << dead.out;
  EXPECT_NE(dead.out.find("rank 2"), std::string::npos) << dead.out;
  EXPECT_LT(dead.seconds, 3 + 10) << dead.out;
}

// The key's names (train/config.h) map to the process group's enum in its order, once for train
// and the all-reduce bench.
TEST(BypassRingTrain, TheNamesMapToTheEnumInOrder) {
  using A = ProcessGroupOptions::CpuAllreduce;
  EXPECT_EQ(cpu_allreduce_names(), (std::vector<std::string>{"gloo", "ring", "bypass-ring"}));
  EXPECT_EQ(cpu_allreduce_from_name("gloo"), A::kGloo);
  EXPECT_EQ(cpu_allreduce_from_name("ring"), A::kRing);
  EXPECT_EQ(cpu_allreduce_from_name("bypass-ring"), A::kBypassRing);
  EXPECT_THROW(cpu_allreduce_from_name("Ring"), Error);
  testing::expect_refused_in_one_line("bench allreduce --procs 2 --cpu-allreduce zip",
                                      "cpu-allreduce must be gloo, ring or bypass-ring, got 'zip'");
}

TEST(BypassRingTrain, BadSettingsAreRefused) {
  const std::string tiny = " --model vit_tiny --batch-size 4 --set workers=1";
  testing::expect_refused_in_one_line("--procs 2 --set cpu-allreduce=zip" + tiny, "cpu-allreduce must be gloo, ring or bypass-ring");
  testing::expect_refused_in_one_line("--steps 1 --set cpu-allreduce=ring" + tiny, "it needs --procs N");
  testing::expect_refused_in_one_line("--procs 2 --set bypass-wait-ms=-1" + tiny, "bypass-wait-ms must be");
}

}  // namespace
}  // namespace vitddp
