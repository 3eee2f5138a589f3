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

class DistributedSampler {
 public:
  explicit DistributedSampler(const SamplerOptions& options);
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  // Samples this rank sees per epoch.
  int64_t num_samples() const { return num_samples_; }
  std::vector<int64_t> indices() const;

 private:
  SamplerOptions options_;
  int64_t epoch_ = 0;
  int64_t num_samples_ = 0;
};

}  // namespace vitddp
