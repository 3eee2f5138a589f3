#include "data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "common/test_utils.h"

namespace vitddp {
namespace {

std::vector<std::vector<int64_t>> shards(int64_t n, int world, int64_t epoch, bool shuffle = true,
                                         bool drop_last = false, uint64_t seed = 3) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < world; ++r) {
    DistributedSampler s({n, r, world, shuffle, seed, drop_last});
    s.set_epoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}

TEST(Sampler, ShardsAreDisjointAndCoverTheDataset) {
  auto sh = shards(12, 4, 0);
  std::set<int64_t> all;
  for (const auto& s : sh) {
    EXPECT_EQ(s.size(), 3u);
    for (int64_t i : s) EXPECT_TRUE(all.insert(i).second) << "index " << i << " on two ranks";
  }
  EXPECT_EQ(all.size(), 12u);
  EXPECT_EQ(*all.rbegin(), 11);
}

TEST(Sampler, PaddingWrapsAroundSoEveryRankHasTheSameCount) {
  auto sh = shards(10, 4, 0);  // 3 per rank, 12 in all: 2 samples repeat
  std::map<int64_t, int> counts;
  for (const auto& s : sh) {
    EXPECT_EQ(s.size(), 3u);
    for (int64_t i : s) ++counts[i];
  }
  EXPECT_EQ(counts.size(), 10u);  // every sample is seen
  int repeated = 0;
  for (auto& [i, c] : counts) {
    EXPECT_GE(i, 0);
    EXPECT_LT(i, 10);
    repeated += c - 1;
  }
  EXPECT_EQ(repeated, 2);
}

TEST(Sampler, DropLastTruncatesToDisjointShards) {
  auto sh = shards(10, 4, 0, true, true);
  std::set<int64_t> all;
  for (const auto& s : sh) {
    EXPECT_EQ(s.size(), 2u);
    for (int64_t i : s) EXPECT_TRUE(all.insert(i).second);
  }
  EXPECT_EQ(all.size(), 8u);
}

TEST(Sampler, SamePermutationOnEveryRank) {
  // Interleaving the ranks' shards (rank r holds positions r, r + W, ...) must rebuild one
  // permutation of the dataset, identical however the ranks are computed.
  for (int64_t epoch : {0, 1, 5}) {
    auto sh = shards(20, 4, epoch);
    std::vector<int64_t> perm(20);
    for (int r = 0; r < 4; ++r)
      for (size_t k = 0; k < sh[r].size(); ++k) perm[k * 4 + r] = sh[r][k];
    std::vector<int64_t> sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(sorted[i], i);
    // A single-rank sampler sees the whole permutation in the same order.
    EXPECT_EQ(shards(20, 1, epoch)[0], perm);
  }
}

TEST(Sampler, ReshufflesPerEpochAndIsReproducible) {
  auto e0 = shards(100, 2, 0), e1 = shards(100, 2, 1), e0b = shards(100, 2, 0);
  EXPECT_EQ(e0, e0b);
  EXPECT_NE(e0[0], e1[0]);
  EXPECT_NE(shards(100, 2, 0, true, false, 3)[0], shards(100, 2, 0, true, false, 4)[0]);  // seed matters
  std::vector<int64_t> identity(100);
  for (int64_t i = 0; i < 100; ++i) identity[i] = i;
  EXPECT_NE(shards(100, 1, 0)[0], identity);
  EXPECT_EQ(shards(100, 1, 7, /*shuffle=*/false)[0], identity);
}

TEST(Sampler, RejectsBadOptions) {
  EXPECT_TRUE(testing::throws_with([] { DistributedSampler({0, 0, 1}); }, {"empty"}));
  EXPECT_TRUE(testing::throws_with([] { DistributedSampler({10, 4, 4}); }, {"rank 4 out of range"}));
  EXPECT_TRUE(testing::throws_with([] { DistributedSampler({3, 0, 4, true, 0, true}); }, {"cannot be split"}));
}

}  // namespace
}  // namespace vitddp
