// The reducer against a fake process group that records collectives and pretends a second
// rank contributed twice our gradient (so the average is 1.5x ours): buckets, index-order
// launches during backward, views vs copies, unused parameters.
#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "common/tiny_ddp.h"
#include "common/test_utils.h"
#include "distributed/reducer.h"
#include "framework/nn/param_arena.h"
#include "framework/ops/cross_entropy.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/reduce.h"
#include "framework/ops/linear.h"
#include "models/vit/vit.h"

namespace vitddp {
namespace {

using testing::FakeGroup;

using DdpFixture = testing::TinyDdp;

// Hand-made parameters in a CPU arena, wired to a Reducer over a FakeGroup through their
// gradient-ready hooks: for tests that choose the order gradients arrive in.
struct HandMadeDdp {
  HandMadeDdp(NamedTensors named, const ReducerOptions& options) : params(std::move(named)), arena(params, Device::cpu()) {
    std::vector<ReducerParam> rp;
    for (size_t i = 0; i < params.size(); ++i) rp.push_back({params[i].first, params[i].second, arena.offset_of(i)});
    reducer = std::make_unique<Reducer>(rp, arena.flat_grads(), group, make_allreduce_hook(), options);
    for (size_t i = 0; i < params.size(); ++i)
      params[i].second.register_grad_ready_hook([this, i](const Tensor&) { reducer->mark_ready(i); });
  }
  // One backward of `loss` between the reducer's prepare_for_backward() and finalize().
  void step(const std::function<Tensor()>& loss) {
    arena.zero_grad();
    reducer->prepare_for_backward();
    loss().backward();
    reducer->finalize();
  }
  NamedTensors params;
  ParamArena arena;
  FakeGroup group;
  std::unique_ptr<Reducer> reducer;
};

std::vector<std::vector<double>> grads_of(const NamedTensors& params) {
  std::vector<std::vector<double>> out;
  for (auto& [name, p] : params) out.push_back(p.grad().to_vector());
  return out;
}

TEST(Reducer, AveragesEveryGradientInBucketOrderDuringBackward) {
  for (bool view : {true, false}) {
    ReducerOptions options;
    options.bucket_cap_bytes = 40000;
    options.first_bucket_cap_bytes = 5000;
    options.grad_as_bucket_view = view;
    DdpFixture s(options);
    // Reference gradients without communication.
    s.arena.zero_grad();
    s.reducer->set_sync(false);
    s.loss().backward();
    s.reducer->set_sync(true);
    auto plain = grads_of(s.params);
    s.arena.zero_grad();
    // Bucket 0 must be launched before the backward ends: count launches at the first
    // gradient of the earliest-registered parameter (class_token, ready last).
    size_t launched_before_last = 0;
    s.params[0].second.register_grad_ready_hook(
        [&](const Tensor&) { launched_before_last = s.group.calls.size(); });
    const std::vector<BucketInfo> buckets = s.reducer->buckets();  // finalize() may rebuild them
    s.reducer->prepare_for_backward();
    s.loss().backward();
    s.reducer->finalize();
    ASSERT_GE(buckets.size(), 3u);
    EXPECT_EQ(s.group.calls.size(), buckets.size());
    EXPECT_GE(launched_before_last, 1u) << "no bucket was launched before backward reached the first layer";
    for (size_t b = 0; b < buckets.size(); ++b) {
      EXPECT_EQ(s.group.calls[b], buckets[b].numel) << "bucket " << b << " out of order";
      EXPECT_EQ(buckets[b].is_view, view);
    }
    auto reduced = grads_of(s.params);
    for (size_t i = 0; i < plain.size(); ++i)
      for (size_t k = 0; k < plain[i].size(); ++k)
        ASSERT_NEAR(reduced[i][k], 1.5 * plain[i][k], 1e-6 + 1e-5 * std::abs(plain[i][k])) << s.params[i].first;
  }
}

TEST(Reducer, BucketsFollowReverseRegistrationOrderAndCaps) {
  ReducerOptions options;
  options.bucket_cap_bytes = 40000;
  options.first_bucket_cap_bytes = 5000;
  DdpFixture s(options);
  const auto& buckets = s.reducer->buckets();
  EXPECT_EQ(buckets.front().params.front(), s.params.size() - 1);  // the head's bias first
  EXPECT_EQ(buckets.back().params.back(), 0u);                     // class_token last
  EXPECT_LE(buckets.front().bytes, 5000u + 4 * 64 * 10);
  size_t expected = s.params.size();
  for (const auto& b : buckets)
    for (size_t i : b.params) EXPECT_EQ(i, --expected);
}

TEST(Reducer, UnusedParameterIsAnErrorNamingItUnlessAsked) {
  ReducerOptions options;
  DdpFixture s(options);
  s.reducer->prepare_for_backward();
  // A backward that only reaches the head: every other parameter is unused.
  Generator gen(3);
  Tensor x = testing::random_tensor({2, 64}, gen, DType::kF32);
  NamedTensors& p = s.params;
  Tensor w = p[p.size() - 2].second, b = p[p.size() - 1].second;
  cross_entropy(linear(x, w, b), Tensor::from_vector_i64({0, 1}, {2})).backward();
  EXPECT_TRUE(testing::throws_with([&] { s.reducer->finalize(); },
                                   {"received no gradient", "class_token", "find-unused-parameters=true"}));

  ReducerOptions find;
  find.find_unused_parameters = true;
  DdpFixture t(find);
  t.arena.zero_grad();
  t.reducer->prepare_for_backward();
  Tensor w2 = t.params[t.params.size() - 2].second, b2 = t.params.back().second;
  cross_entropy(linear(x, w2, b2), Tensor::from_vector_i64({0, 1}, {2})).backward();
  t.reducer->finalize();
  EXPECT_EQ(t.group.calls.size(), t.reducer->buckets().size());
  for (double g : t.params[0].second.grad().to_vector()) EXPECT_EQ(g, 0.0);
}

TEST(Reducer, NoSyncStepsCommunicateNothing) {
  DdpFixture s(ReducerOptions{});
  s.reducer->set_sync(false);
  s.reducer->prepare_for_backward();
  s.loss().backward();
  s.reducer->finalize();
  EXPECT_TRUE(s.group.calls.empty());
}

}  // namespace
}  // namespace vitddp

namespace vitddp {
namespace {

// Records the observer calls as "ready 3", "begin 3", ... in order.
struct RecordingObserver final : BucketObserver {
  std::vector<std::pair<std::string, size_t>> calls;
  void bucket_ready(size_t i, const BucketInfo&) override { calls.push_back({"ready", i}); }
  void launch_begin(size_t i, const BucketInfo&) override { calls.push_back({"begin", i}); }
  void launch_end(size_t i, const BucketInfo&) override { calls.push_back({"end", i}); }
  void bucket_finished(size_t i, const BucketInfo&) override { calls.push_back({"finished", i}); }
};

TEST(Reducer, ObserverSeesEachBucketReadyThenLaunchedInIndexOrderThenFinished) {
  ReducerOptions options;
  options.bucket_cap_bytes = 40000;
  options.first_bucket_cap_bytes = 5000;
  DdpFixture s(options);
  RecordingObserver observer;
  s.reducer->set_observer(&observer);
  s.arena.zero_grad();
  s.reducer->prepare_for_backward();
  s.loss().backward();
  s.reducer->finalize();
  const size_t buckets = s.reducer->buckets().size();
  ASSERT_GE(buckets, 3u);
  ASSERT_EQ(observer.calls.size(), 4 * buckets);
  std::vector<int> ready_at(buckets, -1), begin_at(buckets, -1), end_at(buckets, -1), finished_at(buckets, -1);
  for (size_t k = 0; k < observer.calls.size(); ++k) {
    auto [what, i] = observer.calls[k];
    ASSERT_LT(i, buckets);
    std::vector<int>& slot = what == "ready" ? ready_at : what == "begin" ? begin_at : what == "end" ? end_at : finished_at;
    EXPECT_EQ(slot[i], -1) << what << " twice for bucket " << i;
    slot[i] = static_cast<int>(k);
  }
  for (size_t i = 0; i < buckets; ++i) {
    EXPECT_LT(ready_at[i], begin_at[i]) << "bucket " << i;
    EXPECT_EQ(end_at[i], begin_at[i] + 1) << "bucket " << i << ": nothing between its launch begin and end";
    EXPECT_LT(end_at[i], finished_at[i]) << "bucket " << i;
    if (i > 0) {
      EXPECT_LT(begin_at[i - 1], begin_at[i]) << "launches in index order";
      EXPECT_LT(finished_at[i - 1], finished_at[i]);
    }
  }
  // Overlap on the host: the first bucket is launched before the last one is ready.
  EXPECT_LT(begin_at[0], ready_at[buckets - 1]);
  s.reducer->set_observer(nullptr);
}

}  // namespace
}  // namespace vitddp

namespace vitddp {
namespace {

// Three parameters used against their registration order: p2 scales the input first, then p1,
// then p0, so gradients arrive p0, p1, p2 while the reverse-registration guess made buckets
// [p2], [p1], [p0]: bucket 1 completes first and waits for bucket 0. After the first backward
// the reducer rebuilds the buckets in the observed order (all still views), once.
TEST(Reducer, RebuildsBucketsOnceWhenGradientsArriveOutOfBucketOrder) {
  Tensor p0 = Tensor::from_vector({0.5, -1.5, 2.0, 0.25}, {4}).set_requires_grad(true);
  Tensor p1 = Tensor::from_vector({1.5, 0.5, -0.75, 3.0}, {4}).set_requires_grad(true);
  Tensor p2 = Tensor::from_vector({-1.0, 2.5, 0.5, 1.25}, {4}).set_requires_grad(true);
  ReducerOptions options;
  options.bucket_cap_bytes = 16;  // one parameter per bucket
  options.first_bucket_cap_bytes = 16;
  HandMadeDdp ddp({{"p0", p0}, {"p1", p1}, {"p2", p2}}, options);
  Reducer& reducer = *ddp.reducer;
  FakeGroup& group = ddp.group;
  ASSERT_EQ(reducer.buckets().size(), 3u);
  EXPECT_EQ(reducer.buckets()[0].params, std::vector<size_t>{2});  // the guess: p2 first
  const Tensor x = Tensor::from_vector({1, 2, 3, 4}, {4});
  auto step = [&] { ddp.step([&] { return sum(mul(p0, mul(p1, mul(p2, x)))); }); };
  step();
  EXPECT_EQ(reducer.rebuilds(), 1);
  EXPECT_EQ(reducer.ready_order(), (std::vector<size_t>{0, 1, 2}));
  for (size_t b = 0; b < 3; ++b) {
    EXPECT_EQ(reducer.buckets()[b].params, std::vector<size_t>{b}) << "rebuilt in the order gradients arrived";
    EXPECT_TRUE(reducer.buckets()[b].is_view);
  }
  // Later steps keep the rebuilt buckets and still average (FakeGroup: 1.5x ours).
  group.calls.clear();
  step();
  EXPECT_EQ(reducer.rebuilds(), 1);
  ASSERT_EQ(group.calls.size(), 3u);
  const std::vector<double> g0 = p0.grad().to_vector(), g2 = p2.grad().to_vector();
  const std::vector<double> xs = x.to_vector(), v0 = p0.to_vector(), v1 = p1.to_vector(), v2 = p2.to_vector();
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_NEAR(g0[k], 1.5 * v1[k] * v2[k] * xs[k], 1e-5);
    EXPECT_NEAR(g2[k], 1.5 * v0[k] * v1[k] * xs[k], 1e-5);
  }
}

// A checkpoint's buckets replace the guess and the rebuild check; bad lists are refused by name.
// Two buckets in the wrong order: the second completes first and waits for all of the first.
TEST(Reducer, RebuildsTwoBucketsThatCompleteInReverse) {
  Tensor p0 = Tensor::from_vector({0.5, -1.5, 2.0, 0.25}, {4}).set_requires_grad(true);
  Tensor p1 = Tensor::from_vector({1.5, 0.5, -0.75, 3.0}, {4}).set_requires_grad(true);
  ReducerOptions options;
  options.bucket_cap_bytes = 16;
  options.first_bucket_cap_bytes = 16;
  HandMadeDdp ddp({{"p0", p0}, {"p1", p1}}, options);
  Reducer& reducer = *ddp.reducer;
  EXPECT_EQ(reducer.buckets()[0].params, std::vector<size_t>{1});
  ddp.step([&] { return sum(mul(p0, mul(p1, Tensor::from_vector({1, 2, 3, 4}, {4})))); });  // p0's gradient first
  EXPECT_EQ(reducer.rebuilds(), 1);
  EXPECT_EQ(reducer.buckets()[0].params, std::vector<size_t>{0});
}

TEST(Reducer, RestoredBucketsAreUsedAndCheckedAndSkipTheRebuild) {
  ReducerOptions options;
  options.bucket_cap_bytes = 40000;
  options.first_bucket_cap_bytes = 5000;
  options.grad_as_bucket_view = false;  // would rebuild after the first step otherwise
  DdpFixture s(options);
  const size_t n = s.params.size();
  std::vector<std::vector<size_t>> halves(2);
  for (size_t i = n; i-- > 0;) halves[i < n / 2 ? 1 : 0].push_back(i);
  s.reducer->restore_buckets(halves);
  ASSERT_EQ(s.reducer->buckets().size(), 2u);
  EXPECT_EQ(s.reducer->buckets()[0].params, halves[0]);
  s.arena.zero_grad();
  s.reducer->prepare_for_backward();
  s.loss().backward();
  s.reducer->finalize();
  EXPECT_EQ(s.reducer->rebuilds(), 0);
  EXPECT_EQ(s.reducer->buckets()[1].params, halves[1]);
  EXPECT_EQ(s.group.calls.size(), 2u);
  std::vector<std::vector<size_t>> missing = {halves[0]};
  EXPECT_TRUE(testing::throws_with([&] { s.reducer->restore_buckets(missing); }, {"is in no bucket"}));
  std::vector<std::vector<size_t>> twice = {halves[0], halves[1], {0}};
  EXPECT_TRUE(testing::throws_with([&] { s.reducer->restore_buckets(twice); }, {"class_token", "in two buckets"}));
  std::vector<std::vector<size_t>> beyond = {halves[0], halves[1], {n}};
  EXPECT_TRUE(testing::throws_with([&] { s.reducer->restore_buckets(beyond); }, {"names parameter"}));
}

TEST(Reducer, KeepsViewBucketsWhenTheWaitIsSmall) {
  ReducerOptions options;
  options.bucket_cap_bytes = 40000;
  options.first_bucket_cap_bytes = 5000;
  DdpFixture s(options);
  const std::vector<BucketInfo> before = s.reducer->buckets();
  s.arena.zero_grad();
  s.reducer->prepare_for_backward();
  s.loss().backward();
  s.reducer->finalize();
  // Gradients arrive weight before bias, so a few bucket edges are off by a bias; rebuilding
  // would cost views for a wait of a few kilobytes, and the reducer keeps its buckets.
  EXPECT_EQ(s.reducer->rebuilds(), 0);
  ASSERT_EQ(s.reducer->buckets().size(), before.size());
  for (size_t b = 0; b < before.size(); ++b) EXPECT_EQ(s.reducer->buckets()[b].params, before[b].params);
}

// tail-bucket-mb (Note [The tail buckets]): the reducer makes the tail and says how many buckets
// hold it, again after the rebuild from the observed order; restored buckets have none. Four
// parameters of 16 bytes, used so that gradients arrive p0, p1, p2, p3 against the guess's
// reverse order; buckets of 48 bytes after a first of 16, the tail (the last 48 bytes) in 16.
TEST(Reducer, TailBucketsSurviveTheRebuildAndNotARestore) {
  std::vector<Tensor> p;
  NamedTensors params;
  for (int k = 0; k < 4; ++k) {
    p.push_back(Tensor::from_vector({0.5 + k, -1.5, 2.0, 0.25 * k}, {4}).set_requires_grad(true));
    params.push_back({"p" + std::to_string(k), p.back()});
  }
  ReducerOptions options;
  options.bucket_cap_bytes = 48;
  options.first_bucket_cap_bytes = 16;
  options.tail_bucket_cap_bytes = 16;
  HandMadeDdp ddp(params, options);
  Reducer& reducer = *ddp.reducer;
  auto params_of = [&] {
    std::vector<std::vector<size_t>> out;
    for (const BucketInfo& b : reducer.buckets()) out.push_back(b.params);
    return out;
  };
  // The guess: p3 in the first bucket, then the tail p2, p1, p0 one by one.
  EXPECT_EQ(params_of(), (std::vector<std::vector<size_t>>{{3}, {2}, {1}, {0}}));
  EXPECT_EQ(reducer.tail_buckets(), 3u);
  const Tensor x = Tensor::from_vector({1, 2, 3, 4}, {4});
  ddp.step([&] { return sum(mul(p[0], mul(p[1], mul(p[2], mul(p[3], x))))); });
  ASSERT_EQ(reducer.rebuilds(), 1);
  EXPECT_EQ(params_of(), (std::vector<std::vector<size_t>>{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(reducer.tail_buckets(), 3u);
  reducer.restore_buckets(params_of());
  EXPECT_EQ(reducer.tail_buckets(), 0u);
}

}  // namespace
}  // namespace vitddp
