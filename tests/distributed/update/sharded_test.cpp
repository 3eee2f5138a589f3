// Note [Sharded updates]: ShardedUpdate over real Gloo ranks (forked processes). Each rank
// updates only its part of each bucket, yet the weights are the plain DDP update's (bit for bit
// with two ranks); the optimizer state outside a rank's parts stays stale until gather_state(); the
// first step, which may rebuild the buckets, updates everything; a non-finite gradient that only
// one rank's part holds is reported by every rank; each bucket's update is issued beside
// backward, those of unused parameters' buckets too; bucket_shard's geometry.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "common/gloo_ranks.h"
#include "common/multiprocess.h"
#include "common/test_utils.h"
#include "common/tiny_ddp.h"
#include "distributed/update/bucket_shard.h"
#include "distributed/hooks/reduce_scatter.h"
#include "distributed/update/sharded.h"
#include "framework/ops/cross_entropy.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/linear.h"
#include "framework/ops/reduce.h"
#include "framework/optim/nonfinite.h"

namespace vitddp {
namespace {

TEST(BucketShard, EqualPartsAndAShortRemainder) {
  const BucketShard a = bucket_shard(10, 3);
  EXPECT_EQ(a.part, 3);
  EXPECT_EQ(a.rest_begin, 9);
  EXPECT_TRUE(a.has_rest());
  EXPECT_EQ(a.own_begin(2), 6);
  const BucketShard b = bucket_shard(4096, 2);
  EXPECT_EQ(b.part, 2048);
  EXPECT_FALSE(b.has_rest());
  const BucketShard c = bucket_shard(2, 4);  // fewer elements than ranks: all remainder
  EXPECT_EQ(c.part, 0);
  EXPECT_EQ(c.rest_begin, 0);
  EXPECT_TRUE(c.has_rest());
  EXPECT_THROW(bucket_shard(8, 0), Error);
  EXPECT_THROW(bucket_shard(-1, 2), Error);
}

// vit_tiny in a CPU arena, its buckets reduced over `group` by the plain all-reduce hook or the
// reduce-scatter one, SGD with momentum and weight decay. Every rank starts from the same
// weights and feeds its own images.
struct RankRun {
  VisionTransformer model{vit_config_by_name("vit_tiny"), 4};
  NamedTensors params = model.named_parameters();
  ParamArena arena{params, Device::cpu()};
  std::unique_ptr<Reducer> reducer;
  std::unique_ptr<Optimizer> optimizer;
  Tensor report = Tensor::zeros({1}, DType::kI64);

  RankRun(ProcessGroup& group, bool sharded, bool rebuild, bool find_unused = false) {
    Generator gen(1);
    for (auto& [name, p] : params) fill_uniform(p, gen, -0.2, 0.2);
    std::vector<ReducerParam> rp;
    for (size_t i = 0; i < params.size(); ++i) rp.push_back({params[i].first, params[i].second, arena.offset_of(i)});
    std::unique_ptr<CommHook> hook = sharded ? std::make_unique<ReduceScatterHook>() : make_allreduce_hook();
    ReducerOptions options = testing::small_bucket_options(1.0, rebuild);
    options.find_unused_parameters = find_unused;
    reducer = std::make_unique<Reducer>(rp, arena.flat_grads(), group, std::move(hook), options);
    for (size_t i = 0; i < params.size(); ++i)
      params[i].second.register_grad_ready_hook([this, i](const Tensor&) { reducer->mark_ready(i); });
    optimizer = make_sgd(arena, SgdConfig{0.05, 0.9, 0.01});
    optimizer->set_nonfinite_report(report);
  }
  Tensor loss(uint64_t seed) {
    Generator gen(seed);
    Tensor images = testing::random_tensor({2, 3, 32, 32}, gen, DType::kF32);
    return cross_entropy(model.forward(images), Tensor::from_vector_i64({1, 7}, {2}));
  }
  Tensor momentum() const { return optimizer->state().at(0).second; }
};

// Two ranks: the same bytes. More: within `tolerance` (a sum of three or more terms depends on
// the order Gloo's ring adds them in, which follows the length of what it reduces).
bool same_values(const Tensor& a, const Tensor& b, int world) {
  if (world <= 2) return std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::fabs(x[i] - y[i]) > 1e-6f) return false;
  return true;
}

// Whether a and b differ (by more than same_values allows) somewhere in the buckets' parts
// owned by ranks other than `rank`.
bool differ_outside_own_parts(const Tensor& a, const Tensor& b, const Reducer& reducer, int rank, int world) {
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  for (size_t k = 0; k < reducer.buckets().size(); ++k) {
    const auto [begin, end] = reducer.flat_ranges(k).front();
    const BucketShard shard = bucket_shard(end - begin, world);
    for (int r = 0; r < world; ++r) {
      if (r == rank) continue;
      for (int64_t i = begin + shard.own_begin(r); i < begin + shard.own_begin(r) + shard.part; ++i)
        if (std::fabs(x[i] - y[i]) > 1e-5f) return true;
    }
  }
  return false;
}

void expect_the_plain_weights(int world) {
  testing::run_on_gloo_ranks(world, "vitddp_sharded", [world](int rank, ProcessGroup& group) {
    for (bool rebuild : {true, false}) {
      RankRun plain(group, false, rebuild), sharded(group, true, rebuild);
      ShardedUpdate shards(*sharded.reducer, group, *sharded.optimizer, sharded.arena, sharded.report);
      for (uint64_t step = 0; step < 3; ++step) {
        const uint64_t seed = 10 + 7 * step + static_cast<uint64_t>(rank);
        plain.arena.zero_grad();
        plain.reducer->prepare_for_backward();
        plain.loss(seed).backward();
        plain.reducer->finalize();
        plain.optimizer->step();

        sharded.arena.zero_grad();
        shards.begin_step();
        // The step that may rebuild the buckets all-reduces and updates every weight.
        VITDDP_CHILD_CHECK(shards.scatters() == !(rebuild && step == 0), "step ", step);
        sharded.reducer->prepare_for_backward();
        sharded.loss(seed).backward();
        shards.after_backward(/*sync=*/true);
      }
      const size_t buckets = sharded.reducer->buckets().size();
      VITDDP_CHILD_CHECK(buckets >= 3, buckets, " buckets");
      VITDDP_CHILD_CHECK(shards.sharded_updates() == (rebuild ? 2 : 3) * buckets, shards.sharded_updates());
      // f32: the weights the forward reads are the master, gathered every step.
      VITDDP_CHILD_CHECK(same_values(plain.arena.flat_master(), sharded.arena.flat_master(), world), "rebuild ",
                         rebuild);
      VITDDP_CHILD_CHECK(world == 1 || differ_outside_own_parts(plain.momentum(), sharded.momentum(),
                                                                 *sharded.reducer, rank, world),
                         "the momentum of other ranks' parts was updated here too");
      shards.gather_state();
      VITDDP_CHILD_CHECK(same_values(plain.momentum(), sharded.momentum(), world), "momentum after gather_state()");
      VITDDP_CHILD_CHECK(plain.report.data<int64_t>()[0] == kNoNonfinite &&
                         sharded.report.data<int64_t>()[0] == kNoNonfinite);
    }
    return 0;
  });
}

TEST(ShardedUpdate, GivesThePlainWeightsOnTwoRanks) { expect_the_plain_weights(2); }
// Three ranks: vit_tiny's buckets leave remainders, all-reduced and updated by every rank; the
// sums of three may round differently from the plain all-reduce's.
TEST(ShardedUpdate, GivesThePlainWeightsOnThreeRanks) { expect_the_plain_weights(3); }

// Rank 1's loss makes one parameter's gradient NaN, a parameter inside rank 1's part of its
// bucket only: rank 0's update never reads it, yet both ranks report its first element.
TEST(ShardedUpdate, ANonfiniteGradientInOnePartIsReportedByEveryRank) {
  testing::run_on_gloo_ranks(2, "vitddp_sharded_nan", [](int rank, ProcessGroup& group) {
    RankRun run(group, true, /*rebuild=*/false);
    ShardedUpdate shards(*run.reducer, group, *run.optimizer, run.arena, run.report);
    int64_t poisoned = -1;
    for (size_t i = 0; i < run.params.size() && poisoned < 0; ++i) {
      const auto [begin, end] = run.reducer->flat_ranges(run.reducer->bucket_of(i)).front();
      const BucketShard shard = bucket_shard(end - begin, 2);
      const int64_t first = run.arena.offset_of(i), last = first + run.params[i].second.numel();
      if (first >= begin + shard.own_begin(1) && last <= begin + shard.own_begin(1) + shard.part)
        poisoned = static_cast<int64_t>(i);
    }
    VITDDP_CHILD_CHECK(poisoned >= 0, "no parameter lies inside rank 1's part of its bucket");
    run.arena.zero_grad();
    shards.begin_step();
    run.reducer->prepare_for_backward();
    Tensor loss = run.loss(3 + static_cast<uint64_t>(rank));
    if (rank == 1) loss = add(loss, scale(sum(run.params[poisoned].second), std::nan("")));
    loss.backward();
    shards.after_backward(/*sync=*/true);
    const int64_t reported = run.report.data<int64_t>()[0];
    VITDDP_CHILD_CHECK(reported == run.arena.offset_of(static_cast<size_t>(poisoned)), "reported ", reported,
                       ", the NaN gradient starts at ", run.arena.offset_of(static_cast<size_t>(poisoned)));
    return 0;
  });
}

// Note [Updates beside backward]: in a scattered step each bucket's update is issued when the next
// bucket launches, during backward, and only the last one's after it.
TEST(ShardedUpdate, EachBucketIsUpdatedOnceTheNextOneLaunched) {
  testing::run_on_gloo_ranks(2, "vitddp_sharded_launch", [](int rank, ProcessGroup& group) {
    RankRun run(group, true, /*rebuild=*/false);
    ShardedUpdate shards(*run.reducer, group, *run.optimizer, run.arena, run.report);
    const size_t buckets = run.reducer->buckets().size();
    VITDDP_CHILD_CHECK(buckets >= 3, buckets, " buckets");
    run.arena.zero_grad();
    shards.begin_step();
    run.reducer->prepare_for_backward();
    run.loss(5 + static_cast<uint64_t>(rank)).backward();
    VITDDP_CHILD_CHECK(shards.issued_in_backward() == buckets - 1, shards.issued_in_backward(), " of ", buckets);
    VITDDP_CHILD_CHECK(shards.issued_after_backward() == 0, shards.issued_after_backward());
    shards.after_backward(/*sync=*/true);
    VITDDP_CHILD_CHECK(shards.issued_after_backward() == 1, shards.issued_after_backward());
    VITDDP_CHILD_CHECK(shards.sharded_updates() == buckets, shards.sharded_updates());
    return 0;
  });
}

// A backward that reaches only the head under find_unused_parameters: the other parameters'
// buckets launch in after_backward() (finalize_deferred), and each is still updated and waited
// for, as finalize() + step() does (zero gradients: weight decay and momentum still move them).
TEST(ShardedUpdate, UpdatesTheBucketsOfUnusedParameters) {
  testing::run_on_gloo_ranks(1, "vitddp_sharded_unused", [](int rank, ProcessGroup& group) {
    RankRun plain(group, false, false, /*find_unused=*/true), sharded(group, true, false, /*find_unused=*/true);
    ShardedUpdate shards(*sharded.reducer, group, *sharded.optimizer, sharded.arena, sharded.report);
    Generator gen(3);
    const Tensor x = testing::random_tensor({2, 64}, gen, DType::kF32);
    auto head_loss = [&](RankRun& s) {
      const NamedTensors& p = s.params;
      return cross_entropy(linear(x, p[p.size() - 2].second, p.back().second), Tensor::from_vector_i64({0, 1}, {2}));
    };
    for (int step = 0; step < 2; ++step) {
      plain.arena.zero_grad();
      plain.reducer->prepare_for_backward();
      head_loss(plain).backward();
      plain.reducer->finalize();
      plain.optimizer->step();

      sharded.arena.zero_grad();
      shards.begin_step();
      sharded.reducer->prepare_for_backward();  // throws if a bucket of the last step was never waited for
      head_loss(sharded).backward();
      shards.after_backward(/*sync=*/true);
    }
    VITDDP_CHILD_CHECK(shards.issued_after_backward() >= 2, shards.issued_after_backward());
    const Tensor a = plain.arena.flat_master(), b = sharded.arena.flat_master();
    VITDDP_CHILD_CHECK(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0, "the weights differ");
    return 0;
  });
}

// begin_step() and after_backward() pair up; a replayed step closes what begin_step() opened.
TEST(ShardedUpdate, CallsOutOfOrderAreRefusedAndAReplayClosesItsStep) {
  testing::run_on_gloo_ranks(1, "vitddp_sharded_order", [](int rank, ProcessGroup& group) {
    RankRun run(group, true, false);
    ShardedUpdate shards(*run.reducer, group, *run.optimizer, run.arena, run.report);
    auto throws = [](auto f) {
      try {
        f();
      } catch (const Error&) {
        return true;
      }
      return false;
    };
    VITDDP_CHILD_CHECK(throws([&] { shards.after_backward(true); }), "after_backward() without begin_step()");
    shards.begin_step();
    VITDDP_CHILD_CHECK(throws([&] { shards.begin_step(); }), "begin_step() twice");
    shards.replayed();
    VITDDP_CHILD_CHECK(throws([&] { shards.replayed(); }), "replayed() twice");
    VITDDP_CHILD_CHECK(throws([&] { shards.after_backward(true); }), "after_backward() after a replay");
    shards.begin_step();
    run.arena.zero_grad();
    run.reducer->prepare_for_backward();
    run.loss(3).backward();
    shards.after_backward(true);
    VITDDP_CHILD_CHECK(throws([&] { shards.replayed(); }), "replayed() after after_backward()");
    return 0;
  });
}

// The reduce-scatter hook all-reduces until told to scatter.
TEST(ReduceScatterHook, AllReducesUntilToldToScatter) {
  testing::FakeGroup group;
  ReduceScatterHook hook;
  EXPECT_FALSE(hook.scatters());
  GradBucket bucket;
  bucket.buffer = Tensor::from_vector({1, 2, 3, 4, 5}, {5}, DType::kF32);
  hook.run(group, bucket)->wait();
  EXPECT_EQ(bucket.buffer.to_vector(), (std::vector<double>{1.5, 3, 4.5, 6, 7.5}));
  hook.set_scatter(true);
  bucket.buffer = Tensor::from_vector({1, 2, 3, 4, 5}, {5}, DType::kF32);
  hook.run(group, bucket)->wait();
  // FakeGroup is rank 0 of 2: its part [0, 2) and the remainder [4, 5) averaged; [2, 4) its own.
  EXPECT_EQ(bucket.buffer.to_vector(), (std::vector<double>{1.5, 3, 3, 4, 7.5}));
}

}  // namespace
}  // namespace vitddp
