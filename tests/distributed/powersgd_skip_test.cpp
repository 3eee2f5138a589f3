// PowerSGD under --nonfinite skip: a step whose all-reduced gradients are not finite leaves the
// error-feedback buffers and Q exactly as they were, on every rank and in every bucket (Note
// [PowerSGD and skipped steps]). Two Gloo ranks in forked processes; then the same through
// `train --procs 2`, comparing the checkpoints before and after the skipped step.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "common/gloo_ranks.h"
#include "common/multiprocess.h"
#include "common/test_utils.h"
#include "common/train_process.h"
#include "distributed/hooks/powersgd.h"
#include "distributed/process_group.h"
#include "framework/io/safetensors.h"

namespace vitddp {
namespace {


// Two buckets (the second is the step's last), each a matrix PowerSGD compresses and a bias it
// sends as it is.
std::vector<GradBucket> make_buckets() {
  std::vector<GradBucket> buckets;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{8, 12}, {6, 10}}) {
    GradBucket b;
    b.index = buckets.size();
    b.params = {0, 1};
    b.offsets = {0, rows * cols};
    b.shapes = {{rows, cols}, {rows}};
    b.buffer = Tensor::zeros({rows * cols + rows}, DType::kF32, Device::cpu());
    buckets.push_back(b);
  }
  buckets.back().is_last = true;
  return buckets;
}

// The hook's state, bucket by bucket: error, Q and the sent P, as bytes-exact doubles.
std::vector<std::vector<double>> snapshot(const PowerSgdHook& hook) {
  std::vector<std::vector<double>> out;
  for (const auto& [index, b] : hook.state().buckets) {
    out.push_back(b.error.to_vector());
    out.push_back(b.q.to_vector());
    out.push_back(b.sent_p.defined() ? b.sent_p.to_vector() : std::vector<double>());
  }
  return out;
}

bool all_finite(const std::vector<std::vector<double>>& state) {
  for (const auto& v : state)
    for (double x : v)
      if (!std::isfinite(x)) return false;
  return true;
}

bool all_finite(const Tensor& t) {
  for (double x : t.to_vector())
    if (!std::isfinite(x)) return false;
  return true;
}

// One step as the reducer runs it: buckets launched in order, then waited in order. Rank r's
// gradients depend on (rank, step); `poison` puts `bad` into one element of bucket `bucket`.
void step(ProcessGroup& group, PowerSgdHook& hook, std::vector<GradBucket>& buckets, int step, bool poison,
          size_t bucket, int64_t element, double bad) {
  Generator gen(1000 * static_cast<uint64_t>(step) + static_cast<uint64_t>(group.rank()));
  std::vector<std::shared_ptr<Work>> works;
  for (GradBucket& b : buckets) {
    b.buffer.copy_(testing::random_tensor(b.buffer.shape(), gen, DType::kF32));
    if (poison && b.index == bucket) b.buffer.data<float>()[element] = static_cast<float>(bad);
    works.push_back(hook.run(group, b));
  }
  for (auto& w : works) w->wait();
}

struct Poison {
  const char* what;
  int rank;           // whose gradient
  size_t bucket;
  int64_t element;    // in the bucket: < rows * cols is the matrix, beyond it the bias
  double value;
};

class PowerSgdSkip : public ::testing::TestWithParam<Poison> {};

TEST_P(PowerSgdSkip, ASkippedStepLeavesErrorAndQUntouchedOnEveryRank) {
  if (!has_gloo_backend()) GTEST_SKIP() << "this build has no Gloo";
  const Poison poison = GetParam();
  constexpr int kBadStep = 2;
  testing::run_on_gloo_ranks(2, "psgd_skip", [&](int rank, ProcessGroup& group) {
    PowerSgdHook hook(PowerSgdOptions{1, 0, 2.0, true, true, 11});
    std::vector<GradBucket> buckets = make_buckets();
    std::vector<std::vector<double>> before;
    for (int s = 0; s < 4; ++s) {
      before = snapshot(hook);
      const bool bad = s == kBadStep;
      step(group, hook, buckets, s, bad && rank == poison.rank, poison.bucket, poison.element, poison.value);
      const std::vector<std::vector<double>> after = snapshot(hook);
      // Every rank sees the non-finite result (so NonfiniteCheck skips the update there too).
      VITDDP_CHILD_CHECK(all_finite(buckets[poison.bucket].buffer) == !bad, "step ", s);
      if (bad) {
        VITDDP_CHILD_CHECK(after == before, "step ", s, ": the skipped step changed the PowerSGD state");
      } else {
        VITDDP_CHILD_CHECK(all_finite(after), "step ", s, ": the state is not finite");
        VITDDP_CHILD_CHECK(s == 0 || after != before, "step ", s, ": a good step did not update the state");
      }
    }
    VITDDP_CHILD_CHECK(hook.state().iter == 4, "iter ", hook.state().iter);
    return 0;
  });
}

INSTANTIATE_TEST_SUITE_P(
    Poisons, PowerSgdSkip,
    ::testing::Values(Poison{"NaNInTheLastBucketsMatrix", 1, 1, 5, std::nan("")},
                      // A NaN in the first bucket only: the last bucket, finite, must not commit alone.
                      Poison{"InfInTheFirstBucketsBias", 0, 0, 96 + 3, INFINITY}),
    [](const ::testing::TestParamInfo<Poison>& info) { return std::string(info.param.what); });

// `train --procs 2` with PowerSGD in small buckets, a checkpoint after every step, and rank
// 1's loss NaN in step 3, under --nonfinite `policy`.
testing::TrainOutcome train_with_nan_in_step_3(const std::string& policy, const std::string& checkpoint_dir) {
  return testing::run_train("VITDDP_FAULT=1:2:nan",
                            "--procs 2 --model vit_tiny --batch-size 4 --set workers=1 --steps 4 "
                            "--print-every 0 --json --hook powersgd --powersgd-start-iter 1 --bucket-mb 0.05 "
                            "--nonfinite " + policy + " --checkpoint-dir " + checkpoint_dir +
                                " --checkpoint-every 1 --set checkpoint-keep=10");
}

// Under --nonfinite stop the hook updates its state in place (PowerSgdOptions::stage_state
// false): on finite steps the buckets and the state are bit-identical to the staged hook's.
TEST(PowerSgdInPlace, MatchesTheStagedHookOnFiniteSteps) {
  if (!has_gloo_backend()) GTEST_SKIP() << "this build has no Gloo";
  testing::run_on_gloo_ranks(2, "psgd_in_place", [](int rank, ProcessGroup& group) {
    PowerSgdOptions staged_options{1, 1, 2.0, true, true, 11};
    PowerSgdOptions in_place_options = staged_options;
    in_place_options.stage_state = false;
    PowerSgdHook staged(staged_options), in_place(in_place_options);
    std::vector<GradBucket> a = make_buckets(), b = make_buckets();
    for (int s = 0; s < 4; ++s) {
      step(group, staged, a, s, false, 0, 0, 0.0);
      step(group, in_place, b, s, false, 0, 0, 0.0);
      for (size_t k = 0; k < a.size(); ++k)
        VITDDP_CHILD_CHECK(a[k].buffer.to_vector() == b[k].buffer.to_vector(), "step ", s, ", bucket ", k);
      VITDDP_CHILD_CHECK(snapshot(staged) == snapshot(in_place), "step ", s, ": the states differ");
      VITDDP_CHILD_CHECK(s < 2 || all_finite(snapshot(in_place)), "step ", s);
    }
    return 0;
  });
}

// The trainer under --nonfinite stop: the run stops at the non-finite step before saving it, so
// no checkpoint holds the state that step left (PowerSGD's, updated in place).
TEST(PowerSgdInPlaceCli, NoCheckpointIsWrittenForTheNonFiniteStep) {
  testing::TempFolder dir("vitddp_psgd_stop_train");
  const std::string ckpt = dir.path() + "/ckpt";
  testing::TrainOutcome o = train_with_nan_in_step_3("stop", ckpt);
  EXPECT_EQ(o.code, 5) << o.out;
  EXPECT_NE(o.out.find("non-finite gradient"), std::string::npos) << o.out;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string step = ckpt + "/step-00000";
    EXPECT_TRUE(std::filesystem::exists(step + "2/rank-" + std::to_string(rank) + ".safetensors")) << o.out;
    EXPECT_FALSE(std::filesystem::exists(step + "3")) << "rank " << rank << ": the non-finite step was saved";
    const SafetensorsFile before = read_safetensors(step + "2/rank-" + std::to_string(rank) + ".safetensors");
    for (const auto& [name, t] : before.tensors) EXPECT_TRUE(all_finite(t)) << "rank " << rank << ": " << name;
  }
}

// The same through the trainer: checkpoints after every step; the one after the skipped step
// holds the same PowerSGD state (and weights) as the one before it, on both ranks.
TEST(PowerSgdSkipCli, CheckpointsBeforeAndAfterTheSkippedStepAreEqual) {
  testing::TempFolder dir("vitddp_psgd_skip_train");
  const std::string ckpt = dir.path() + "/ckpt";
  testing::TrainOutcome o = train_with_nan_in_step_3("skip", ckpt);
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_EQ(o.json()["skipped_steps"], 1) << o.out;
  for (int rank = 0; rank < 2; ++rank) {
    auto read = [&](int s) {
      return read_safetensors(ckpt + "/step-00000" + std::to_string(s) + "/rank-" + std::to_string(rank) +
                              ".safetensors");
    };
    const SafetensorsFile before = read(2), after = read(3), later = read(4);
    ASSERT_EQ(after.tensors.size(), before.tensors.size());
    ASSERT_EQ(later.tensors.size(), before.tensors.size());
    size_t powersgd_tensors = 0;
    bool later_differs = false;
    for (size_t i = 0; i < before.tensors.size(); ++i) {
      const auto& [name, t] = before.tensors[i];
      ASSERT_EQ(after.tensors[i].first, name);
      if (name.rfind("powersgd.", 0) == 0) ++powersgd_tensors;
      EXPECT_EQ(after.tensors[i].second.to_vector(), t.to_vector()) << "rank " << rank << ": " << name;
      later_differs |= later.tensors[i].second.to_vector() != t.to_vector();
    }
    EXPECT_GT(powersgd_tensors, 2u) << "rank " << rank;
    EXPECT_TRUE(later_differs) << "rank " << rank << ": the step after the skipped one changed nothing";
  }
}

}  // namespace
}  // namespace vitddp
