#include "data/sampler.h"

#include <algorithm>
#include <numeric>

#include "framework/core/error.h"
#include "framework/core/random.h"

namespace vitddp {

DistributedSampler::DistributedSampler(const SamplerOptions& options) : options_(options) {
  VITDDP_CHECK(options.dataset_size > 0, "sampler: dataset is empty");
  VITDDP_CHECK(options.world_size > 0 && options.rank >= 0 && options.rank < options.world_size,
               "sampler: rank ", options.rank, " out of range for world size ", options.world_size);
  if (options.drop_last) {
    num_samples_ = options.dataset_size / options.world_size;
    VITDDP_CHECK(num_samples_ > 0, "sampler: ", options.dataset_size, " samples cannot be split across ",
                 options.world_size, " ranks with drop_last");
  } else {
    num_samples_ = (options.dataset_size + options.world_size - 1) / options.world_size;
  }
}

std::vector<int64_t> DistributedSampler::indices_of(int64_t epoch) const {
  std::vector<int64_t> all(options_.dataset_size);
  std::iota(all.begin(), all.end(), 0);
  if (options_.shuffle) {
    // Fisher-Yates with the project's counter-based generator: the same on every rank.
    Generator gen(mix64(options_.seed, static_cast<uint64_t>(epoch)));
    for (int64_t i = options_.dataset_size - 1; i > 0; --i) {
      int64_t j = static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(i + 1));
      std::swap(all[i], all[j]);
    }
  }
  const int64_t total = num_samples_ * options_.world_size;
  if (options_.drop_last) {
    all.resize(total);
  } else {
    for (int64_t i = options_.dataset_size; i < total; ++i) all.push_back(all[i % options_.dataset_size]);
  }
  std::vector<int64_t> mine;
  mine.reserve(num_samples_);
  for (int64_t i = options_.rank; i < total; i += options_.world_size) mine.push_back(all[i]);
  return mine;
}

StridedOrder::StridedOrder(int64_t dataset_size, int rank, int world_size) : rank_(rank), world_(world_size) {
  VITDDP_CHECK(world_size > 0 && rank >= 0 && rank < world_size, "strided order: rank ", rank,
               " out of range for world size ", world_size);
  VITDDP_CHECK(dataset_size >= world_size, "evaluation: ", dataset_size, " samples for ", world_size,
               " ranks (each rank needs one at least)");
  num_samples_ = (dataset_size - rank + world_size - 1) / world_size;
}

std::vector<int64_t> StridedOrder::indices_of(int64_t) const {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = 0; i < num_samples_; ++i) out.push_back(rank_ + i * world_);
  return out;
}

}  // namespace vitddp
