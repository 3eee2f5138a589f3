// BatchMixing's draws and mixing (the parity with torchvision v2 for a fixed draw is in
// tests/train/recipe_parity_test.cpp), and the loader's mixed batches.
#include "data/batch_mixing.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/test_utils.h"
#include "data/loader.h"
#include "data/synthetic_dataset.h"

namespace vitddp {
namespace {

using testing::random_tensor;

TEST(BatchMixing, BetaDrawsHaveTheBetaMeanAndVariance) {
  for (double alpha : {0.2, 1.0, 3.0}) {
    Generator gen(11);
    constexpr int kDraws = 40000;
    double sum = 0, sum_sq = 0;
    for (int i = 0; i < kDraws; ++i) {
      const double x = sample_beta(gen, alpha, alpha);
      ASSERT_TRUE(x >= 0 && x <= 1) << x;
      sum += x;
      sum_sq += x * x;
    }
    const double mean = sum / kDraws, var = sum_sq / kDraws - mean * mean;
    const double want_var = 1.0 / (4.0 * (2.0 * alpha + 1.0));
    EXPECT_NEAR(mean, 0.5, 0.01) << "alpha " << alpha;
    EXPECT_NEAR(var, want_var, 0.04 * want_var) << "alpha " << alpha;
  }
}

TEST(BatchMixing, TheDrawIsAFunctionOfTheStepAndBothKindsAreChosen) {
  const BatchMixing both(0.2, 1.0, 10, 99);
  int cutmix = 0;
  for (int64_t step = 0; step < 2000; ++step) {
    const MixingDraw a = both.draw(step, 32, 48), b = both.draw(step, 32, 48);
    ASSERT_EQ(a.lam, b.lam);
    ASSERT_EQ(a.x1, b.x1);
    if (a.kind == MixingDraw::Kind::kCutmix) {
      ++cutmix;
      ASSERT_TRUE(0 <= a.x1 && a.x1 <= a.x2 && a.x2 <= 48 && 0 <= a.y1 && a.y1 <= a.y2 && a.y2 <= 32);
      ASSERT_NEAR(a.target_lam, 1.0 - double((a.x2 - a.x1) * (a.y2 - a.y1)) / (32 * 48), 1e-15);
    } else {
      ASSERT_EQ(a.target_lam, a.lam);
    }
  }
  EXPECT_NEAR(cutmix, 1000, 100);
  EXPECT_NE(both.draw(0, 32, 48).lam, BatchMixing(0.2, 1.0, 10, 100).draw(0, 32, 48).lam);
}

TEST(BatchMixing, TargetsAreRowsOfTwoLabelsThatSumToOne) {
  Generator gen(3);
  Tensor images = random_tensor({4, 3, 8, 8}, gen, DType::kF32);
  const Tensor original = images.clone();
  Tensor labels = Tensor::empty({4}, DType::kI64);
  const int64_t y[] = {2, 0, 0, 5};
  std::copy(y, y + 4, labels.data<int64_t>());
  Tensor targets = Tensor::empty({4, 6}, DType::kF32);
  const BatchMixing mixup(1.0, 0.0, 6, 1);
  const MixingDraw d = mixup.draw(0, 8, 8);
  mixup.mix(d, images, labels, targets);
  const float* t = targets.data<float>();
  for (int64_t i = 0; i < 4; ++i) {
    double row = 0;
    for (int64_t c = 0; c < 6; ++c) row += t[i * 6 + c];
    EXPECT_NEAR(row, 1.0, 1e-6);
    const int64_t prev = (i + 3) % 4;
    EXPECT_NEAR(t[i * 6 + y[i]], y[i] == y[prev] ? 1.0 : d.lam, 1e-6);
  }
  // Sample 0 mixes with the last one, from the images as they were.
  const float* x = images.data<float>();
  const float* o = original.data<float>();
  const int64_t per = 3 * 8 * 8;
  EXPECT_NEAR(x[5], d.lam * o[5] + (1 - d.lam) * o[3 * per + 5], 1e-6);
  EXPECT_NEAR(x[per + 5], d.lam * o[per + 5] + (1 - d.lam) * o[5], 1e-6);
  Tensor narrow = Tensor::empty({4, 5}, DType::kF32);
  EXPECT_THROW(mixup.mix(d, images, labels, narrow), Error);
  EXPECT_THROW(BatchMixing(0, 0, 6, 1), Error);
}

TEST(BatchMixing, TheLoaderMixesItsBatchesTheSameForAnyNumberOfWorkers) {
  SyntheticDataset data(64, 3, 8, 8, 10, 7);
  auto run = [&](int workers) {
    LoaderOptions o;
    o.batch_size = 8;
    o.num_workers = workers;
    o.mixing = std::make_shared<BatchMixing>(0.2, 1.0, 12, 4);
    DataLoader loader(data, DistributedSampler({64, 0, 1, true, 5, false}), o);
    std::vector<Batch> out;
    for (int i = 0; i < 10; ++i) out.push_back(loader.next());
    return out;
  };
  const std::vector<Batch> a = run(0), b = run(3);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].labels.shape(), (Shape{8, 12}));
    ASSERT_EQ(a[i].labels.dtype(), DType::kF32);
    EXPECT_EQ(testing::max_abs_diff(a[i].images, b[i].images), 0.0);
    EXPECT_EQ(testing::max_abs_diff(a[i].labels, b[i].labels), 0.0);
  }
}

}  // namespace
}  // namespace vitddp
