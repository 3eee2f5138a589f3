#include "data/loader.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "common/test_utils.h"
#include "data/synthetic_dataset.h"

namespace vitddp {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

SamplerOptions sampler_options(int64_t n, int rank = 0, int world = 2) { return {n, rank, world, true, 17, false}; }

// The batches a loader must produce, computed directly from the sampler and the dataset.
struct Expected {
  std::vector<float> images;
  std::vector<int64_t> labels;
  int64_t epoch;
};

std::vector<Expected> expected_batches(const Dataset& d, const SamplerOptions& so, int64_t batch, bool drop_last,
                                       int64_t count) {
  std::vector<Expected> out;
  DistributedSampler s(so);
  for (int64_t epoch = 0; static_cast<int64_t>(out.size()) < count; ++epoch) {
    s.set_epoch(epoch);
    std::vector<int64_t> idx = s.indices();
    for (size_t b = 0; b < idx.size() && static_cast<int64_t>(out.size()) < count; b += batch) {
      size_t n = std::min<size_t>(batch, idx.size() - b);
      if (drop_last && n < static_cast<size_t>(batch)) break;
      Expected e{std::vector<float>(n * d.image_numel()), std::vector<int64_t>(n), epoch};
      for (size_t i = 0; i < n; ++i) d.get(idx[b + i], e.images.data() + i * d.image_numel(), &e.labels[i]);
      out.push_back(std::move(e));
    }
  }
  return out;
}

void expect_batch(const Batch& b, const Expected& e, int64_t step) {
  ASSERT_EQ(b.labels.numel(), static_cast<int64_t>(e.labels.size())) << "step " << step;
  EXPECT_EQ(b.step, step);
  EXPECT_EQ(b.epoch, e.epoch) << "step " << step;
  EXPECT_EQ(b.images.dtype(), DType::kF32);
  EXPECT_EQ(b.labels.dtype(), DType::kI64);
  EXPECT_EQ(b.images.shape(), (Shape{b.labels.numel(), 3, 4, 5}));
  std::vector<float> img(b.images.data<float>(), b.images.data<float>() + b.images.numel());
  std::vector<int64_t> lab(b.labels.data<int64_t>(), b.labels.data<int64_t>() + b.labels.numel());
  EXPECT_EQ(img, e.images) << "step " << step;
  EXPECT_EQ(lab, e.labels) << "step " << step;
}

TEST(DataLoader, SameBatchSequenceForAnyWorkerCountAcrossEpochs) {
  SyntheticDataset d(103, 3, 4, 5, 10, 1);
  SamplerOptions so = sampler_options(103);  // 52 samples per rank: batches 16, 16, 16, 4
  for (bool drop_last : {false, true}) {
    const int64_t steps = drop_last ? 10 : 13;  // past three epoch boundaries
    auto expected = expected_batches(d, so, 16, drop_last, steps);
    for (int workers : {0, 1, 4}) {
      for (int prefetch : {1, 4}) {
        LoaderOptions lo;
        lo.batch_size = 16;
        lo.num_workers = workers;
        lo.prefetch = prefetch;
        lo.drop_last = drop_last;
        DataLoader loader(d, DistributedSampler(so), lo);
        EXPECT_EQ(loader.batches_per_epoch(), drop_last ? 3 : 4);
        for (int64_t s = 0; s < steps; ++s) expect_batch(loader.next(), expected[s], s);
        LoaderStats st = loader.stats();
        EXPECT_EQ(st.batches, steps);
        EXPECT_EQ(st.images, drop_last ? steps * 16 : 3 * 52 + 16);
      }
    }
  }
}

TEST(DataLoader, StartsAtTheSamplersEpochAndResumesAtAStep) {
  SyntheticDataset d(103, 3, 4, 5, 10, 1);
  SamplerOptions so = sampler_options(103, 1);
  auto expected = expected_batches(d, so, 16, false, 12);
  LoaderOptions lo;
  lo.batch_size = 16;
  lo.start_step = 6;  // epoch 1, third batch
  DataLoader loader(d, DistributedSampler(so), lo);
  for (int64_t s = 6; s < 12; ++s) expect_batch(loader.next(), expected[s], s);

  DistributedSampler at_epoch_1(so);
  at_epoch_1.set_epoch(1);
  lo.start_step = 0;
  DataLoader from_epoch_1(d, at_epoch_1, lo);
  Batch b = from_epoch_1.next();
  EXPECT_EQ(b.epoch, 1);
  expect_batch(b, expected[4], 0);
}

// A dataset that is slow, counts calls and can fail on one index.
class TestDataset : public Dataset {
 public:
  TestDataset(int64_t size, int64_t fail_at, int sleep_us) : size_(size), fail_at_(fail_at), sleep_us_(sleep_us) {}
  int64_t size() const override { return size_; }
  Shape image_shape() const override { return {3, 4, 5}; }
  int64_t num_classes() const override { return 2; }
  void get(int64_t index, float* image, int64_t* label) const override {
    ++calls;
    if (sleep_us_) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    VITDDP_CHECK(index != fail_at_, "test dataset: sample ", index, " is corrupt");
    for (int i = 0; i < 60; ++i) image[i] = static_cast<float>(index);
    *label = index % 2;
  }
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t size_, fail_at_;
  int sleep_us_;
};

TEST(DataLoader, EarlyDestructionDoesNotHang) {
  TestDataset d(1000, -1, 200);
  LoaderOptions lo;
  lo.batch_size = 8;
  lo.num_workers = 4;
  lo.prefetch = 8;
  auto t0 = Clock::now();
  {
    DataLoader never_used(d, DistributedSampler(sampler_options(1000)), lo);
  }
  {
    DataLoader one_batch(d, DistributedSampler(sampler_options(1000)), lo);
    one_batch.next();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the workers fill the queue
  }
  EXPECT_LT(seconds_since(t0), 5.0);
  // Prefetch is bounded: at most 1 + 8 batches were ever built.
  EXPECT_LE(d.calls.load(), 2 * 9 * 8);
}

TEST(DataLoader, WorkerExceptionIsRethrownInOrder) {
  // Sample 37 fails; with shuffle off and one rank, it is in batch 4 (samples 32..39).
  for (int workers : {0, 1, 4}) {
    TestDataset d(100, 37, 0);
    LoaderOptions lo;
    lo.batch_size = 8;
    lo.num_workers = workers;
    DataLoader loader(d, DistributedSampler({100, 0, 1, /*shuffle=*/false, 0, false}), lo);
    for (int s = 0; s < 4; ++s) EXPECT_EQ(loader.next().images.data<float>()[0], 8.0f * s) << workers;
    EXPECT_TRUE(testing::throws_with([&] { loader.next(); }, {"test dataset: sample 37 is corrupt"})) << workers;
    EXPECT_TRUE(testing::throws_with([&] { loader.next(); }, {"sample 37 is corrupt"})) << "sticky";
  }
}

TEST(DataLoader, UsesThePluggableAllocator) {
  SyntheticDataset d(40, 3, 4, 5, 10, 1);
  std::atomic<int> calls{0};
  LoaderOptions lo;
  lo.batch_size = 10;
  lo.num_workers = 2;
  lo.allocator = [&](const Shape& shape, DType dtype) {
    ++calls;
    return Tensor::empty(shape, dtype);
  };
  {
    DataLoader loader(d, DistributedSampler(sampler_options(40, 0, 1)), lo);
    for (int i = 0; i < 3; ++i) loader.next();
  }
  EXPECT_GE(calls.load(), 6);
  lo.allocator = [](const Shape& shape, DType dtype) { return Tensor::empty({shape[0]}, dtype); };
  DataLoader bad(d, DistributedSampler(sampler_options(40, 0, 1)), lo);
  EXPECT_TRUE(testing::throws_with([&] { bad.next(); }, {"allocator returned the wrong shape"}));
}

TEST(DataLoader, RejectsBadOptions) {
  SyntheticDataset d(10, 3, 4, 5, 10, 1);
  DistributedSampler s(sampler_options(10, 0, 1));
  LoaderOptions lo;
  lo.batch_size = 0;
  EXPECT_TRUE(testing::throws_with([&] { DataLoader(d, s, lo); }, {"batch size must be positive"}));
  lo.batch_size = 11;
  lo.drop_last = true;
  EXPECT_TRUE(testing::throws_with([&] { DataLoader(d, s, lo); }, {"make no full batch of 11"}));
  lo = LoaderOptions();
  lo.prefetch = 0;
  EXPECT_TRUE(testing::throws_with([&] { DataLoader(d, s, lo); }, {"prefetch must be >= 1"}));
  SyntheticDataset small(5, 3, 4, 5, 10, 1);
  EXPECT_TRUE(testing::throws_with([&] { DataLoader(small, s, LoaderOptions()); }, {"only 5 samples"}));
}

// ImageNet-sized random images through two workers: every batch comes back whole, in order,
// and the stats count each image once. The rate is printed for the record, not checked (the
// loader's speed is `train bench loader`'s business).
TEST(DataLoader, TwoWorkersDeliverImageNetSizedBatchesAndCountThem) {
  SyntheticDataset d(4096, 3, 224, 224, 1000, 1);
  LoaderOptions lo;
  lo.batch_size = 32;
  lo.num_workers = 2;
  DataLoader loader(d, DistributedSampler(sampler_options(4096, 0, 1)), lo);
  loader.next();  // warm up
  auto t0 = Clock::now();
  const int batches = 6;
  for (int i = 0; i < batches; ++i) {
    Batch b = loader.next();
    EXPECT_EQ(b.images.shape(), (Shape{32, 3, 224, 224})) << "batch " << i + 1;
    EXPECT_EQ(b.labels.shape(), (Shape{32})) << "batch " << i + 1;
    EXPECT_EQ(b.step, i + 1);
  }
  const double secs = seconds_since(t0);
  LoaderStats st = loader.stats();
  std::printf("loader 3x224x224 random, batch 32, 2 workers: %.0f images/s (%.0f incl. warm-up)\n",
              batches * 32 / secs, st.images_per_second());
  EXPECT_EQ(st.batches, batches + 1);
  EXPECT_EQ(st.images, 32 * (batches + 1));
}

}  // namespace
}  // namespace vitddp
