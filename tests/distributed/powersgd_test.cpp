// PowerSGD against closed forms, with a fake 2-rank group whose other rank sends 2x ours.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/fake_group.h"
#include "common/powersgd_paths.h"
#include "common/test_utils.h"
#include "distributed/hooks/powersgd.h"

namespace vitddp {
namespace {

TEST(PowerSgd, PlainAllReduceBeforeTheStartIteration) {
  Generator gen(1);
  GradBucket b = testing::random_bucket(gen, {{4, 6}, {6}});
  std::vector<double> before = b.buffer.to_vector();
  testing::FakeGroup group;
  PowerSgdHook hook(PowerSgdOptions{1, 1, 2.0, true, true, 0});
  hook.run(group, b)->wait();
  std::vector<double> after = b.buffer.to_vector();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_NEAR(after[i], 1.5 * before[i], 1e-6);
  EXPECT_EQ(hook.state().iter, 1);
}

TEST(PowerSgd, FullRankReproducesTheAverage) {
  Generator gen(2);
  // rank 4 = rows of both matrices: P spans R^4, so P P^T M = M.
  GradBucket b = testing::random_bucket(gen, {{4, 6}, {4, 9}, {5}});
  std::vector<double> before = b.buffer.to_vector();
  testing::FakeGroup group;
  PowerSgdHook hook(PowerSgdOptions{4, 0, 0.0, true, true, 7});
  hook.run(group, b)->wait();
  std::vector<double> after = b.buffer.to_vector();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_NEAR(after[i], 1.5 * before[i], 1e-4) << i;
  // As PyTorch's hook, the error is the local input minus the averaged result: here -0.5x.
  std::vector<double> error = hook.settled_error(0).to_vector();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_NEAR(error[i], -0.5 * before[i], 1e-4) << i;
}

TEST(PowerSgd, RankOneErrorFeedbackCarriesExactlyWhatWasNotSent) {
  Generator gen(3);
  GradBucket b = testing::random_bucket(gen, {{8, 12}, {8}});
  testing::FakeGroup group;
  PowerSgdHook hook(PowerSgdOptions{1, 0, 2.0, true, true, 9});
  std::vector<double> input = b.buffer.to_vector();
  hook.run(group, b)->wait();
  std::vector<double> sent = b.buffer.to_vector(), error = hook.settled_error(0).to_vector();
  double lost = 0;
  for (size_t i = 0; i < input.size(); ++i) {
    EXPECT_NEAR(error[i] + sent[i], input[i], 1e-5) << i;  // compensated input = approximation + error
    lost += std::abs(error[i]);
  }
  EXPECT_GT(lost, 1e-2);  // rank 1 of an 8x12 random matrix loses something
  for (size_t i = 96; i < input.size(); ++i) EXPECT_NEAR(sent[i], 1.5 * input[i], 1e-5);  // the bias: uncompressed
  // Step 2 compresses gradient + error.
  Tensor next = testing::random_tensor(b.buffer.shape(), gen, DType::kF32);
  std::vector<double> fresh = next.to_vector();
  b.buffer.copy_(next);
  std::vector<double> previous_error = error;
  hook.run(group, b)->wait();
  std::vector<double> sent2 = b.buffer.to_vector(), error2 = hook.settled_error(0).to_vector();
  for (size_t i = 0; i < fresh.size(); ++i) EXPECT_NEAR(error2[i] + sent2[i], fresh[i] + previous_error[i], 1e-5);
}

// Note [A 16-bit error]: with error_in_bucket_dtype a bf16 bucket's error is kept in bf16,
// staged or in place; what was sent plus the error is the input within bf16's rounding, and the
// approximation is the f32 error's within the rounding of the products' operands. An f32 error
// (a checkpoint written without the setting) is converted on the next step.
TEST(PowerSgd, ABucketDtypeErrorIsKeptInTheBucketsDtype) {
  for (bool staged : {false, true}) {
    SCOPED_TRACE(staged ? "staged" : "in place");
    Generator gen(5);
    GradBucket narrow_bucket = testing::random_bucket(gen, {{8, 12}, {8}});
    narrow_bucket.buffer = narrow_bucket.buffer.to(DType::kBF16);
    GradBucket wide_bucket = narrow_bucket;
    wide_bucket.buffer = narrow_bucket.buffer.clone();
    testing::FakeGroup group;
    PowerSgdOptions wide{2, 0, 2.0, true, true, 9};
    wide.stage_state = staged;
    PowerSgdOptions narrow = wide;
    narrow.error_in_bucket_dtype = true;
    PowerSgdHook wide_hook(wide), narrow_hook(narrow);
    const std::vector<double> input = narrow_bucket.buffer.to_vector();
    narrow_hook.run(group, narrow_bucket)->wait();
    wide_hook.run(group, wide_bucket)->wait();
    const Tensor error = narrow_hook.settled_error(0);
    EXPECT_EQ(error.dtype(), DType::kBF16);
    EXPECT_EQ(wide_hook.state().buckets.at(0).error.dtype(), DType::kF32);
    const std::vector<double> sent = narrow_bucket.buffer.to_vector(), e = error.to_vector();
    const std::vector<double> wide_sent = wide_bucket.buffer.to_vector();
    double lost = 0;
    for (size_t i = 0; i < input.size(); ++i) {
      EXPECT_NEAR(e[i] + sent[i], input[i], 0.02 * std::max(1.0, std::abs(input[i]))) << i;
      EXPECT_NEAR(sent[i], wide_sent[i], 0.05) << i;
      lost += std::abs(e[i]);
    }
    EXPECT_GT(lost, 1e-2);
    // Resumed from an f32 error: converted, then used.
    PowerSgdState::Bucket& st = narrow_hook.state().buckets.at(0);
    st.error = st.error.to(DType::kF32);
    narrow_hook.run(group, narrow_bucket)->wait();
    EXPECT_EQ(narrow_hook.state().buckets.at(0).error.dtype(), DType::kBF16);
  }
}

// Note [PowerSGD's products as bucket passes]: the compensation fused with P = M Q and the pass
// for Q = M^T P send what the matrix products send, step after step (warm-started Q, the error
// fed back, settled a step late by the passes), staged or in place, with f32 and bf16 errors;
// the error stays exact everywhere, the gaps between a group's matrices and the uncompressed
// tensors included.
TEST(PowerSgd, BucketPassProductsSendWhatTheMatrixProductsSend) {
  for (bool staged : {false, true})
    for (bool narrow_error : {false, true}) {
      SCOPED_TRACE(std::string(staged ? "staged" : "in place") + (narrow_error ? ", bf16 error" : ", f32 error"));
      Generator gen(8);
      GradBucket bucket = testing::random_bucket(gen, {{6, 4}, {5}, {6, 4}, {3}, {7, 9}, {6, 4}, {2}});
      bucket.buffer = bucket.buffer.to(DType::kBF16);
      PowerSgdOptions options{2, 0, 0.0, true, true, 4};
      options.stage_state = staged;
      options.error_in_bucket_dtype = narrow_error;
      // On the CPU both paths keep P and Q in f32 (the gemm path widens a bf16 M): only the
      // products' summation order differs.
      testing::expect_passes_send_what_gemm_sends(bucket, options, 1e-5);
    }
}

// Rank 2, warm start, error feedback: settling the error late (the default) and eagerly.
PowerSgdOptions settling(bool late) {
  PowerSgdOptions o{2, 0, 0.0, true, true, 4};
  o.settle_error_late = late;
  return o;
}

// Both hooks sent the same into their buckets and carry the same error (f32: the sums' rounding).
void expect_same_sent_and_error(const GradBucket& a, const PowerSgdHook& ha, const GradBucket& b,
                                const PowerSgdHook& hb) {
  const std::vector<double> sa = a.buffer.to_vector(), sb = b.buffer.to_vector();
  const std::vector<double> ea = ha.settled_error(a.index).to_vector(), eb = hb.settled_error(b.index).to_vector();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_NEAR(sa[i], sb[i], 1e-5 * std::max(1.0, std::abs(sb[i]))) << i;
    EXPECT_NEAR(ea[i], eb[i], 1e-5 * std::max(1.0, std::abs(eb[i]))) << i;
  }
}

// Note [The error settled a step late]: late, the error buffer holds M and the P sent is kept;
// eager, the expansion subtracts it. Step after step both send the same and carry the same error
// (f32: the sums' rounding only), and a late error settled in place goes on as it was.
TEST(PowerSgd, AnErrorSettledLateIsTheEagerOne) {
  Generator gen(12);
  GradBucket late_bucket = testing::random_bucket(gen, {{6, 8}, {5}, {6, 8}, {7, 9}});
  GradBucket eager_bucket = late_bucket;
  eager_bucket.buffer = late_bucket.buffer.clone();
  const Tensor input = late_bucket.buffer.clone();
  testing::FakeGroup group;
  PowerSgdHook late_hook(settling(true)), eager_hook(settling(false));
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    late_bucket.buffer.copy_(input);
    eager_bucket.buffer.copy_(input);
    late_hook.run(group, late_bucket)->wait();
    eager_hook.run(group, eager_bucket)->wait();
    if (step == 2) late_hook.settle_errors();  // as a step that does not settle late would
    expect_same_sent_and_error(late_bucket, late_hook, eager_bucket, eager_hook);
    const std::vector<double> ea = late_hook.settled_error(0).to_vector();
    const PowerSgdState::Bucket& st = late_hook.state().buckets.at(0);
    ASSERT_TRUE(st.sent_p.defined());
    const std::vector<double> sent_p = st.sent_p.to_vector();
    EXPECT_FALSE(eager_hook.state().buckets.at(0).sent_p.defined());
    if (step == 2) {  // settled: the buffer is the error and nothing is pending
      EXPECT_EQ(*std::max_element(sent_p.begin(), sent_p.end()), 0.0);
      EXPECT_EQ(st.error.to_vector(), ea);
    } else {  // this step's P kept for the next; over the matrices the buffer holds M, not the error
      EXPECT_GT(*std::max_element(sent_p.begin(), sent_p.end()), 0.0);
      EXPECT_GT(std::abs(st.error.to_vector()[0] - ea[0]), 1e-6);
    }
  }
  EXPECT_EQ(late_hook.buckets_by_passes(), 4);
  EXPECT_EQ(eager_hook.buckets_by_passes(), 4);
  EXPECT_EQ(late_hook.buckets_settled_late(), 4);
  EXPECT_EQ(eager_hook.buckets_settled_late(), 0);
  EXPECT_EQ(late_hook.buckets_compressed(), 4);
}

// A state left pending by a run that settled late (its checkpoint), taken up by one that settles
// eagerly: the first step settles it, sends what the late run would have sent, and keeps no sent P.
// A sent P for a bucket whose matrices this run does not compress is refused by name.
TEST(PowerSgd, APendingErrorIsSettledByARunThatSettlesEagerly) {
  Generator gen(13);
  GradBucket bucket = testing::random_bucket(gen, {{6, 8}, {5}, {7, 9}});
  const Tensor input = bucket.buffer.clone();
  testing::FakeGroup group;
  PowerSgdHook late_hook(settling(true)), eager_hook(settling(false));
  for (int step = 0; step < 2; ++step) {
    bucket.buffer.copy_(input);
    late_hook.run(group, bucket)->wait();
  }
  for (const auto& [index, b] : late_hook.state().buckets) {  // as a checkpoint carries it over
    PowerSgdState::Bucket& to = eager_hook.state().buckets[index];
    to.error = b.error.clone(), to.q = b.q.clone(), to.sent_p = b.sent_p.clone();
  }
  eager_hook.state().iter = late_hook.state().iter;
  GradBucket other = bucket;
  other.buffer = input.clone();
  bucket.buffer.copy_(input);
  late_hook.run(group, bucket)->wait();
  eager_hook.run(group, other)->wait();
  expect_same_sent_and_error(other, eager_hook, bucket, late_hook);
  EXPECT_FALSE(eager_hook.state().buckets.at(0).sent_p.defined());
  EXPECT_TRUE(eager_hook.state().buckets.at(0).settle_groups.empty());

  PowerSgdOptions high_rank = settling(true);  // rank 10: no matrix of the bucket is compressed any more
  high_rank.rank = 10;
  PowerSgdHook resumed(high_rank);
  resumed.state() = late_hook.state();
  EXPECT_TRUE(testing::throws_with([&] { resumed.run(group, bucket); },
                                   {"powersgd: bucket 0's sent P holds", "where rank 10 needs 0",
                                    "resume with the --powersgd-rank"}));
}

// CommHook::steady: a step may be captured as a CUDA graph only after a compressed step with
// the current buckets (the first makes Q on the host); replays advance the step count.
TEST(PowerSgd, SteadyAfterOneCompressedStepSinceTheBucketsWereBuilt) {
  Generator gen(6);
  GradBucket b = testing::random_bucket(gen, {{8, 12}, {8}});
  testing::FakeGroup group;
  PowerSgdHook hook(PowerSgdOptions{1, 1, 2.0, true, true, 9});
  EXPECT_FALSE(hook.steady());
  hook.run(group, b)->wait();  // plain
  EXPECT_FALSE(hook.steady());
  hook.run(group, b)->wait();  // the first compressed step
  EXPECT_TRUE(hook.steady());
  hook.buckets_rebuilt();
  EXPECT_FALSE(hook.steady());
  hook.run(group, b)->wait();
  EXPECT_TRUE(hook.steady());
  const int64_t iter = hook.state().iter;
  hook.replayed();
  EXPECT_EQ(hook.state().iter, iter + 1);
  PowerSgdHook cold(PowerSgdOptions{1, 0, 2.0, true, /*warm_start=*/false, 9});
  cold.run(group, b)->wait();
  EXPECT_FALSE(cold.steady());  // a new Q from the host every step
  // A step whose last bucket has no matrix (a class token alone): steady after it all the same.
  GradBucket first = testing::random_bucket(gen, {{8, 12}, {8}}), token = testing::random_bucket(gen, {{1, 1, 6}});
  first.is_last = false;
  token.index = 1;
  PowerSgdHook split(PowerSgdOptions{1, 0, 2.0, true, true, 9});
  split.run(group, first)->wait();
  EXPECT_FALSE(split.steady());
  split.run(group, token)->wait();
  EXPECT_TRUE(split.steady());
}

// Note [Uncompressed tensors ride with P]: one all-reduce of P (8 x 1) with the bias (8) behind
// it, then Q (12 x 1): two collectives for the bucket, and the bias still averaged.
TEST(PowerSgd, TwoCollectivesPerBucketWithTheUncompressedTensorsBehindP) {
  Generator gen(5);
  GradBucket b = testing::random_bucket(gen, {{8, 12}, {8}});
  const std::vector<double> input = b.buffer.to_vector();
  testing::FakeGroup group;
  PowerSgdHook hook(PowerSgdOptions{1, 0, 2.0, true, true, 9});
  hook.run(group, b)->wait();
  EXPECT_EQ(group.calls, (std::vector<int64_t>{8 + 8, 12}));
  const std::vector<double> sent = b.buffer.to_vector();
  for (size_t i = 96; i < input.size(); ++i) EXPECT_NEAR(sent[i], 1.5 * input[i], 1e-6) << i;
  // A bucket without a matrix to compress: one averaging all-reduce of its tensors.
  GradBucket biases = testing::random_bucket(gen, {{5}, {3}});
  testing::FakeGroup other;
  PowerSgdHook hook2(PowerSgdOptions{1, 0, 2.0, true, true, 9});
  hook2.run(other, biases)->wait();
  EXPECT_EQ(other.calls, (std::vector<int64_t>{8}));
}

TEST(PowerSgd, SameStartingQOnEveryRank) {
  Generator gen(4);
  GradBucket a = testing::random_bucket(gen, {{8, 12}}), b = a;
  b.buffer = a.buffer.clone();
  testing::FakeGroup group;
  PowerSgdHook h1(PowerSgdOptions{2, 0, 0.0, true, true, 5}), h2(PowerSgdOptions{2, 0, 0.0, true, true, 5});
  h1.run(group, a)->wait();
  h2.run(group, b)->wait();
  EXPECT_EQ(a.buffer.to_vector(), b.buffer.to_vector());
}

}  // namespace
}  // namespace vitddp

namespace vitddp {
namespace {

// Same-shape matrices a fixed distance apart (a weight of consecutive layers) are multiplied in
// one strided-batched product; the numbers must be those of one product per matrix. Bucket A
// keeps its three 6x4 matrices 29 elements apart (one group of 3); bucket B puts a longer bias
// between the second and the third (groups of 2 and 1). With the same matrices and the same
// starting Q, rank-1 compression must send the same approximations.
TEST(PowerSgd, BatchedProductsOfSameShapeMatricesMatchOneByOne) {
  Generator gen(5);
  std::vector<Shape> grouped = {{6, 4}, {5}, {6, 4}, {5}, {6, 4}};
  std::vector<Shape> split = {{6, 4}, {5}, {6, 4}, {7}, {6, 4}};
  GradBucket a = testing::random_bucket(gen, grouped);
  GradBucket b = testing::random_bucket(gen, split);
  // The same three matrices in both buckets.
  for (size_t t : {size_t{0}, size_t{2}, size_t{4}}) {
    Tensor src = a.buffer.as_strided({24}, {1}, a.buffer.storage_offset() + a.offsets[t]);
    b.buffer.as_strided({24}, {1}, b.buffer.storage_offset() + b.offsets[t]).copy_(src);
  }
  testing::FakeGroup group;
  PowerSgdHook ha(PowerSgdOptions{1, 0, 0.0, true, true, 11}), hb(PowerSgdOptions{1, 0, 0.0, true, true, 11});
  for (int step = 0; step < 2; ++step) {  // the second step uses the warm-started Q and the error
    ha.run(group, a)->wait();
    hb.run(group, b)->wait();
    for (size_t t : {size_t{0}, size_t{2}, size_t{4}}) {
      std::vector<double> x = a.buffer.as_strided({24}, {1}, a.buffer.storage_offset() + a.offsets[t]).to_vector();
      std::vector<double> y = b.buffer.as_strided({24}, {1}, b.buffer.storage_offset() + b.offsets[t]).to_vector();
      for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-6) << "step " << step << " tensor " << t;
      double moved = 0;
      for (double v : x) moved += std::abs(v);
      EXPECT_GT(moved, 1e-3);
    }
    EXPECT_EQ(ha.state().buckets.at(0).q.numel(), 3 * 4);  // Q: one 4x1 block per matrix
  }
}

}  // namespace
}  // namespace vitddp

namespace vitddp {
namespace {

// Neighbouring 1-D tensors travel as one run of the bucket (here the first two); each still
// gets the plain average, and the matrix between the runs its approximation, not the average.
TEST(PowerSgd, NeighbouringUncompressedTensorsAreAveragedAsOneRun) {
  Generator gen(6);
  GradBucket b = testing::random_bucket(gen, {{5}, {3}, {8, 12}, {4}});
  const std::vector<double> input = b.buffer.to_vector();
  testing::FakeGroup group;
  PowerSgdHook hook(PowerSgdOptions{1, 0, 2.0, true, true, 13});
  hook.run(group, b)->wait();
  const std::vector<double> sent = b.buffer.to_vector();
  for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(sent[i], 1.5 * input[i], 1e-6) << i;
  for (size_t i = 8 + 96; i < input.size(); ++i) EXPECT_NEAR(sent[i], 1.5 * input[i], 1e-6) << i;
  double off = 0;  // the 8x12 matrix was compressed (rank 1 of a random matrix is not its average)
  for (size_t i = 8; i < 8 + 96; ++i) off += std::abs(sent[i] - 1.5 * input[i]);
  EXPECT_GT(off, 1e-2);
}

}  // namespace
}  // namespace vitddp
