// Note [Launch order] and Note [Updates in the next forward]: the reducer launches the buckets
// past its ready-order share last-first, and NextForwardUpdate applies each bucket's update at
// the next forward's first use of its parameters, with weights bit-identical to finalize() +
// step().
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/tiny_ddp.h"
#include "distributed/update/next_forward.h"
#include "distributed/reducer.h"
#include "framework/nn/param_arena.h"
#include "framework/ops/cross_entropy.h"
#include "framework/optim/optimizer.h"
#include "models/vit/vit.h"

namespace vitddp {
namespace {

// The reducer's test setting with an optimizer over its arena.
struct DdpRun : testing::TinyDdpWithOptimizer {
  DdpRun(double share, const std::string& optimizer_name, size_t held = 0)
      : TinyDdpWithOptimizer(testing::small_bucket_options(share, false, held), optimizer_name) {}
};

// One backward: the buckets' collectives go out in `order`.
void expect_collectives_in(DdpRun& s, const std::vector<size_t>& order) {
  s.arena.zero_grad();
  s.reducer->prepare_for_backward();
  s.loss(2).backward();
  s.reducer->finalize();
  ASSERT_EQ(s.group.calls.size(), order.size());
  for (size_t i = 0; i < order.size(); ++i)
    EXPECT_EQ(s.group.calls[i], s.reducer->buckets()[order[i]].numel) << "launch " << i;
}

TEST(LaunchOrder, BucketsPastTheShareGoLastFirst) {
  DdpRun s(0.3, "sgd");
  const std::vector<BucketInfo>& buckets = s.reducer->buckets();
  const size_t n = buckets.size();
  ASSERT_GE(n, 5u);
  double total = 0;
  for (const BucketInfo& b : buckets) total += static_cast<double>(b.bytes);
  // The first buckets in index order until 30% of the bytes, then the rest from the last down.
  std::vector<size_t> expected;
  double sent = 0;
  size_t k = 0;
  while (k == 0 || sent < 0.3 * total) {
    sent += static_cast<double>(buckets[k].bytes);
    expected.push_back(k++);
  }
  ASSERT_LT(k, n);
  for (size_t b = n; b-- > k;) expected.push_back(b);
  EXPECT_EQ(s.reducer->launch_order(), expected);
  expect_collectives_in(s, expected);
}

// Held buckets: 0, then index order from H + 1 until the share, then the rest from the last
// down, and buckets H..1 at the very end; the last launch is bucket 1 (the hooks' step count).
TEST(LaunchOrder, HeldBucketsGoAfterAllOthers) {
  for (size_t held : {1u, 2u}) {
    SCOPED_TRACE("held " + std::to_string(held));
    DdpRun s(0.3, "sgd", held);
    const std::vector<BucketInfo>& buckets = s.reducer->buckets();
    const size_t n = buckets.size();
    ASSERT_GE(n, held + 4);
    double total = 0;
    for (const BucketInfo& b : buckets) total += static_cast<double>(b.bytes);
    std::vector<size_t> expected{0};
    double sent = static_cast<double>(buckets[0].bytes);
    size_t k = held + 1;
    while (sent < 0.3 * total) {
      sent += static_cast<double>(buckets[k].bytes);
      expected.push_back(k++);
    }
    ASSERT_LT(k, n);
    EXPECT_EQ(s.reducer->ready_order_launches(), expected.size());
    for (size_t b = n; b-- > k;) expected.push_back(b);
    for (size_t b = held; b >= 1; --b) expected.push_back(b);
    EXPECT_EQ(s.reducer->launch_order(), expected);
    expect_collectives_in(s, expected);
  }
  // More held than there are buckets: all but the first go after it, last first.
  DdpRun all(0.3, "sgd", 1000);
  const size_t n = all.reducer->buckets().size();
  std::vector<size_t> expected{0};
  for (size_t b = n; b-- > 1;) expected.push_back(b);
  EXPECT_EQ(all.reducer->launch_order(), expected);
  EXPECT_EQ(all.reducer->ready_order_launches(), 1u);
}

TEST(LaunchOrder, ShareOneIsIndexOrderAndOutOfRangeSharesAreRefused) {
  DdpRun s(1.0, "sgd");
  std::vector<size_t> index_order(s.reducer->buckets().size());
  for (size_t b = 0; b < index_order.size(); ++b) index_order[b] = b;
  EXPECT_EQ(s.reducer->launch_order(), index_order);
  for (double bad : {0.0, -0.5, 1.5}) EXPECT_THROW(DdpRun(bad, "sgd"), Error) << bad;
}

TEST(DeferredFinalize, BucketsMustBeWaitedForBeforeTheNextBackward) {
  DdpRun s(0.5, "sgd");
  s.arena.zero_grad();
  s.reducer->prepare_for_backward();
  s.loss(2).backward();
  s.reducer->finalize_deferred();
  EXPECT_THROW(s.reducer->prepare_for_backward(), Error);
  s.reducer->set_sync(false);  // a no-sync micro-batch would accumulate into buckets in flight
  EXPECT_THROW(s.reducer->prepare_for_backward(), Error);
  s.reducer->set_sync(true);
  s.reducer->wait_all();
  s.reducer->wait_all();  // a second time: nothing left
  EXPECT_NO_THROW(s.reducer->prepare_for_backward());
}

// Three steps each way, for SGD with momentum and for AdamW: the master weights are the same
// bytes. Between steps, the updates wait for the forward (but for those launched in ready order
// before buckets sent after backward), and the forward applies every one.
TEST(NextForwardUpdate, GivesTheWeightsOfFinalizeAndStepAndWaitsForTheForward) {
  for (const char* name : {"sgd", "adamw"}) {
    for (auto [share, held] : {std::pair<double, size_t>{1.0, 0}, {0.3, 0}, {0.3, 2}}) {
      SCOPED_TRACE(std::string(name) + ", share " + std::to_string(share) + ", held " + std::to_string(held));
      DdpRun plain(share, name, held), overlapped(share, name, held);
      NextForwardUpdate update(*overlapped.reducer, *overlapped.optimizer, overlapped.arena, overlapped.model, Tensor());
      const size_t buckets = overlapped.reducer->buckets().size();
      for (uint64_t step = 0; step < 3; ++step) {
        plain.plain_step(10 + step);

        Tensor loss = overlapped.loss(10 + step);  // applies the last step's updates
        EXPECT_EQ(update.pending(), 0u);
        update.flush();
        overlapped.arena.zero_grad();
        overlapped.reducer->prepare_for_backward();
        loss.backward();
        update.after_backward(/*sync=*/true);
        // Pending: every bucket, but for those launched in ready order when others follow.
        const size_t in_ready_order = overlapped.reducer->ready_order_launches();
        EXPECT_EQ(update.pending(), in_ready_order < buckets ? buckets - in_ready_order : buckets);
      }
      update.flush();
      EXPECT_EQ(update.pending(), 0u);
      EXPECT_EQ(overlapped.optimizer->step_count(), 3);
      const Tensor a = plain.arena.flat_master(), b = overlapped.arena.flat_master();
      EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0);
    }
  }
}

// The first module of the forward (the patch embedding, with class_token in the last bucket)
// needs the bucket launched right after the ready-order ones; one forward applies every update.
TEST(NextForwardUpdate, TheFirstLayersBucketGoesRightAfterTheReadyOrderOnes) {
  DdpRun s(0.3, "sgd");
  NextForwardUpdate update(*s.reducer, *s.optimizer, s.arena, s.model, Tensor());
  const size_t buckets = s.reducer->buckets().size();
  EXPECT_EQ(s.reducer->bucket_of(0), buckets - 1);  // class_token: registered first, ready last
  const std::vector<size_t>& order = s.reducer->launch_order();
  size_t ready_order = 0;
  while (order[ready_order] == ready_order) ++ready_order;
  EXPECT_GE(ready_order, 1u);
  EXPECT_EQ(order[ready_order], buckets - 1);
  s.arena.zero_grad();
  s.reducer->prepare_for_backward();
  s.loss(3).backward();
  update.after_backward(/*sync=*/true);
  const std::vector<double> before = s.arena.flat_master().to_vector();
  EXPECT_EQ(update.pending(), buckets - ready_order);  // the ready-order ones went after backward
  s.loss(4);
  EXPECT_EQ(update.pending(), 0u);
  EXPECT_NE(s.arena.flat_master().to_vector(), before);
}

}  // namespace
}  // namespace vitddp
