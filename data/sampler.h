// DistributedSampler: the indices of one rank for one epoch, as torch.utils.data's
// DistributedSampler: shuffled per (seed, epoch) when asked, padded by wrapping around so every
// rank gets the same count (or truncated with drop_last), then strided by rank.
#pragma once

#include <cstdint>
#include <vector>

namespace vitddp {

struct SamplerOptions {
  int64_t dataset_size = 0;
  int rank = 0;
  int world_size = 1;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};

// The order in which one rank reads a dataset's samples, epoch by epoch: the loader's source.
class SampleOrder {
 public:
  virtual ~SampleOrder() = default;
  // Samples this rank sees per epoch: the same every epoch and on every rank.
  virtual int64_t num_samples() const = 0;
  // This rank's indices of `epoch`, num_samples() of them.
  virtual std::vector<int64_t> indices_of(int64_t epoch) const = 0;
};

class DistributedSampler final : public SampleOrder {
 public:
  explicit DistributedSampler(const SamplerOptions& options);
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  int64_t num_samples() const override { return num_samples_; }
  std::vector<int64_t> indices() const { return indices_of(epoch_); }
  std::vector<int64_t> indices_of(int64_t epoch) const override;

 private:
  SamplerOptions options_;
  int64_t epoch_ = 0;
  int64_t num_samples_ = 0;
};

// Every sample exactly once over the ranks, in index order: rank r takes r, r + world, ... (the
// ranks' counts differ by one where world does not divide the size). For evaluation.
class StridedOrder final : public SampleOrder {
 public:
  StridedOrder(int64_t dataset_size, int rank, int world_size);
  int64_t num_samples() const override { return num_samples_; }
  std::vector<int64_t> indices_of(int64_t epoch) const override;

 private:
  int rank_, world_;
  int64_t num_samples_;
};

}  // namespace vitddp
