// Note [Updates in backward]: UpdateInBackward updates each bucket once the next one launches,
// during backward, leaves only the last for after_backward(), updates the step that may rebuild
// the buckets after backward, updates the buckets of unused parameters too, and gives the
// weights of finalize() + step() bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "common/tiny_ddp.h"
#include "distributed/reducer.h"
#include "distributed/update_in_backward.h"
#include "framework/nn/param_arena.h"
#include "framework/ops/linear.h"
#include "framework/optim/optimizer.h"

namespace vitddp {
namespace {

struct DdpRun : testing::TinyDdpWithOptimizer {
  DdpRun(bool rebuild, const std::string& optimizer_name)
      : TinyDdpWithOptimizer(testing::small_bucket_options(1.0, rebuild), optimizer_name) {}
};

// Three steps each way, for SGD with momentum and AdamW, with and without the first step's
// bucket rebuild: the master weights are the same bytes.
TEST(UpdateInBackward, GivesTheWeightsOfFinalizeAndStep) {
  for (const char* name : {"sgd", "adamw"}) {
    for (bool rebuild : {false, true}) {
      SCOPED_TRACE(std::string(name) + (rebuild ? ", rebuild" : ""));
      DdpRun plain(rebuild, name), updated(rebuild, name);
      UpdateInBackward update(*updated.reducer, *updated.optimizer, Device::cpu());
      for (uint64_t step = 0; step < 3; ++step) {
        plain.plain_step(10 + step);

        updated.arena.zero_grad();
        update.begin_step();
        // The step that may rebuild the buckets updates after backward; the others in it.
        EXPECT_EQ(update.in_backward(), !(rebuild && step == 0));
        updated.reducer->prepare_for_backward();
        updated.loss(10 + step).backward();
        update.after_backward();
      }
      EXPECT_EQ(updated.optimizer->step_count(), 3);
      const Tensor a = plain.arena.flat_master(), b = updated.arena.flat_master();
      EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0);
    }
  }
}

// A backward that reaches only the head under find_unused_parameters: the other parameters'
// buckets launch in after_backward() (finalize_deferred), and each is still updated and waited
// for, as finalize() + step() does (zero gradients: weight decay and momentum still move them).
TEST(UpdateInBackward, UpdatesTheBucketsOfUnusedParameters) {
  ReducerOptions options = testing::small_bucket_options();
  options.find_unused_parameters = true;
  testing::TinyDdpWithOptimizer plain(options, "sgd"), updated(options, "sgd");
  UpdateInBackward update(*updated.reducer, *updated.optimizer, Device::cpu());
  Generator gen(3);
  const Tensor x = testing::random_tensor({2, 64}, gen, DType::kF32);
  auto head_loss = [&](testing::TinyDdpWithOptimizer& s) {
    const NamedTensors& p = s.params;
    return cross_entropy(linear(x, p[p.size() - 2].second, p.back().second), Tensor::from_vector_i64({0, 1}, {2}));
  };
  for (int step = 0; step < 2; ++step) {
    plain.arena.zero_grad();
    plain.reducer->prepare_for_backward();
    head_loss(plain).backward();
    plain.reducer->finalize();
    plain.optimizer->step();

    updated.arena.zero_grad();
    update.begin_step();
    updated.reducer->prepare_for_backward();  // throws if a bucket of the last step was never waited for
    head_loss(updated).backward();
    update.after_backward();
  }
  EXPECT_GE(update.issued_after_backward(), 2u);
  const Tensor a = plain.arena.flat_master(), b = updated.arena.flat_master();
  EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0);
}

// Watches the weights at each launch: bucket k's are updated by the time bucket k + 2 launches
// (when k + 1 has launched), and the last bucket's only by after_backward().
struct WeightsAtLaunch : BucketObserver {
  const ParamArena& arena;
  std::vector<std::vector<double>> seen;  // the master weights at each launch, in launch order
  explicit WeightsAtLaunch(const ParamArena& a) : arena(a) {}
  void bucket_ready(size_t, const BucketInfo&) override {}
  void launch_begin(size_t, const BucketInfo&) override { seen.push_back(arena.flat_master().to_vector()); }
  void launch_end(size_t, const BucketInfo&) override {}
  void bucket_finished(size_t, const BucketInfo&) override {}
};

TEST(UpdateInBackward, EachBucketIsUpdatedDuringBackwardOnceTheNextOneLaunched) {
  DdpRun s(false, "sgd");
  UpdateInBackward update(*s.reducer, *s.optimizer, Device::cpu());
  WeightsAtLaunch watch(s.arena);
  s.reducer->set_observer(&watch);
  const size_t buckets = s.reducer->buckets().size();
  ASSERT_GE(buckets, 3u);
  const std::vector<double> before = s.arena.flat_master().to_vector();
  s.arena.zero_grad();
  update.begin_step();
  s.reducer->prepare_for_backward();
  s.loss(5).backward();
  ASSERT_EQ(watch.seen.size(), buckets);
  auto changed = [&](const std::vector<double>& weights, size_t b) {
    for (const auto& [begin, end] : s.reducer->flat_ranges(b))
      for (int64_t i = begin; i < end; ++i)
        if (weights[i] != before[i]) return true;
    return false;
  };
  const std::vector<size_t>& order = s.reducer->launch_order();
  for (size_t k = 0; k < buckets; ++k) {
    SCOPED_TRACE("launch " + std::to_string(k));
    for (size_t j = 0; j < buckets; ++j)  // at launch k, exactly the buckets launched before k - 1 are updated
      EXPECT_EQ(changed(watch.seen[k], order[j]), j + 1 < k) << "bucket " << order[j];
  }
  const std::vector<double> after_backward_issued = s.arena.flat_master().to_vector();
  EXPECT_FALSE(changed(after_backward_issued, order.back()));
  update.after_backward();
  const std::vector<double> after = s.arena.flat_master().to_vector();
  for (size_t b = 0; b < buckets; ++b) EXPECT_TRUE(changed(after, b)) << "bucket " << b;
  s.reducer->set_observer(nullptr);
}

TEST(UpdateInBackward, CallsOutOfOrderAreRefusedAndAReplayClosesItsStep) {
  DdpRun s(false, "sgd");
  UpdateInBackward update(*s.reducer, *s.optimizer, Device::cpu());
  EXPECT_THROW(update.after_backward(), Error);
  update.begin_step();
  EXPECT_THROW(update.begin_step(), Error);
  // A replayed step closes what begin_step() opened, and only that.
  update.replayed();
  EXPECT_THROW(update.replayed(), Error);
  EXPECT_THROW(update.after_backward(), Error);
  update.begin_step();
  s.arena.zero_grad();
  s.reducer->prepare_for_backward();
  s.loss(3).backward();
  update.after_backward();
  EXPECT_THROW(update.replayed(), Error);
}

}  // namespace
}  // namespace vitddp
