#include "data/synthetic_dataset.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <thread>

#include "common/test_utils.h"

namespace vitddp {
namespace {

struct Sample {
  std::vector<float> image;
  int64_t label = -1;
  bool operator==(const Sample& o) const { return image == o.image && label == o.label; }
};

Sample get(const Dataset& d, int64_t i) {
  Sample s;
  s.image.resize(static_cast<size_t>(d.image_numel()));
  d.get(i, s.image.data(), &s.label);
  return s;
}

TEST(SyntheticDataset, Metadata) {
  SyntheticDataset d(100, 3, 8, 6, 10, 1);
  EXPECT_EQ(d.size(), 100);
  EXPECT_EQ(d.image_shape(), (Shape{3, 8, 6}));
  EXPECT_EQ(d.image_numel(), 144);
  EXPECT_EQ(d.num_classes(), 10);
  EXPECT_EQ(parse_synthetic_kind("learnable"), SyntheticKind::kLearnable);
  EXPECT_EQ(parse_synthetic_kind("random"), SyntheticKind::kRandom);
  EXPECT_TRUE(testing::throws_with([] { parse_synthetic_kind("noise"); }, {"'noise'", "random or learnable"}));
}

TEST(SyntheticDataset, DeterministicAcrossInstancesAndThreads) {
  for (SyntheticKind kind : {SyntheticKind::kRandom, SyntheticKind::kLearnable}) {
    SyntheticDataset a(64, 3, 5, 7, 10, 42, kind), b(64, 3, 5, 7, 10, 42, kind);
    std::vector<Sample> serial;
    for (int64_t i = 0; i < 64; ++i) {
      serial.push_back(get(a, i));
      EXPECT_EQ(serial.back(), get(b, i)) << i;
    }
    // Four threads over interleaved, reversed indices of one shared instance.
    std::vector<Sample> par(64);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        for (int64_t i = 63 - t; i >= 0; i -= 4) par[i] = get(a, i);
      });
    for (auto& th : threads) th.join();
    for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(par[i], serial[i]) << i;
  }
}

TEST(SyntheticDataset, SeedsAndIndicesDiffer) {
  SyntheticDataset a(10, 1, 4, 4, 5, 1), b(10, 1, 4, 4, 5, 2);
  EXPECT_NE(get(a, 3).image, get(b, 3).image);
  EXPECT_NE(get(a, 3).image, get(a, 4).image);
  SyntheticDataset la(10, 1, 4, 4, 5, 1, SyntheticKind::kLearnable), lb(10, 1, 4, 4, 5, 2, SyntheticKind::kLearnable);
  EXPECT_NE(la.class_pattern(0), lb.class_pattern(0));
  EXPECT_NE(la.class_pattern(0), la.class_pattern(1));
}

TEST(SyntheticDataset, LabelsInRangeAndNotConstant) {
  for (SyntheticKind kind : {SyntheticKind::kRandom, SyntheticKind::kLearnable}) {
    SyntheticDataset d(2000, 1, 2, 2, 10, 7, kind);
    std::vector<int> counts(10);
    for (int64_t i = 0; i < d.size(); ++i) {
      int64_t label = get(d, i).label;
      ASSERT_GE(label, 0);
      ASSERT_LT(label, 10);
      ++counts[label];
    }
    for (int c : counts) EXPECT_GT(c, 120);  // ~200 each
  }
}

TEST(SyntheticDataset, RandomPixelsAreStandardNormal) {
  SyntheticDataset d(50, 3, 16, 16, 10, 5);
  double sum = 0, sq = 0;
  int64_t n = 0;
  for (int64_t i = 0; i < d.size(); ++i)
    for (float v : get(d, i).image) {
      sum += v;
      sq += double(v) * v;
      ++n;
    }
  const double mean = sum / n, var = sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(var, 1.0, 0.03);
}

TEST(SyntheticDataset, LearnableIsPatternPlusNoiseAndSeparable) {
  SyntheticDataset d(300, 3, 8, 8, 10, 9, SyntheticKind::kLearnable, 1.0, 0.5);
  std::vector<std::vector<float>> patterns;
  for (int64_t c = 0; c < 10; ++c) patterns.push_back(d.class_pattern(c));
  double sq = 0;
  int64_t n = 0, correct = 0;
  for (int64_t i = 0; i < d.size(); ++i) {
    Sample s = get(d, i);
    for (size_t k = 0; k < s.image.size(); ++k) {
      double r = s.image[k] - patterns[s.label][k];
      sq += r * r;
      ++n;
    }
    // Nearest pattern classifies every sample: the task is learnable.
    int64_t best = -1;
    double best_d = INFINITY;
    for (int64_t c = 0; c < 10; ++c) {
      double dist = 0;
      for (size_t k = 0; k < s.image.size(); ++k) dist += std::pow(s.image[k] - patterns[c][k], 2);
      if (dist < best_d) best_d = dist, best = c;
    }
    correct += best == s.label;
  }
  EXPECT_NEAR(std::sqrt(sq / n), 0.5, 0.02);
  EXPECT_EQ(correct, d.size());
}

TEST(SyntheticDataset, CachedAndUncachedPatternsAgree) {
  // 3x64x64 with 1400 classes does not fit the pattern cache; 10 classes does.
  SyntheticDataset small(20, 3, 64, 64, 10, 4, SyntheticKind::kLearnable, 2.0, 0.0);
  SyntheticDataset big(20, 3, 64, 64, 1400, 4, SyntheticKind::kLearnable, 2.0, 0.0);
  for (const SyntheticDataset* d : {&small, &big})
    for (int64_t i = 0; i < 5; ++i) {
      Sample s = get(*d, i);
      std::vector<float> p = d->class_pattern(s.label);
      for (float& v : p) v *= 2.0f;
      EXPECT_EQ(s.image, p);
    }
  // The class patterns depend on (seed, class) only, not on the number of classes.
  EXPECT_EQ(small.class_pattern(3), big.class_pattern(3));
}

TEST(SyntheticDataset, RejectsBadArguments) {
  EXPECT_TRUE(testing::throws_with([] { SyntheticDataset(0, 3, 8, 8, 10, 1); }, {"size must be positive"}));
  EXPECT_TRUE(testing::throws_with([] { SyntheticDataset(10, 3, 0, 8, 10, 1); }, {"[3, 0, 8]"}));
  EXPECT_TRUE(testing::throws_with([] { SyntheticDataset(10, 3, 8, 8, 0, 1); }, {"num_classes"}));
  EXPECT_TRUE(testing::throws_with([] { SyntheticDataset(10, 3, 8, 8, 2, 1, SyntheticKind::kLearnable, 1, -1); },
                                   {"noise"}));
  SyntheticDataset d(10, 1, 2, 2, 3, 1);
  float img[4];
  int64_t label;
  EXPECT_TRUE(testing::throws_with([&] { d.get(10, img, &label); }, {"index 10 out of range [0, 10)"}));
  EXPECT_TRUE(testing::throws_with([&] { d.class_pattern(3); }, {"class 3 out of range"}));
}

}  // namespace
}  // namespace vitddp
