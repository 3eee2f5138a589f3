// Tar shards in the WebDataset layout: each sample is the consecutive members KEY.jpg (or .jpeg,
// .png) and KEY.cls (its label as decimal text), KEY being the member's path up to the first dot
// of its file name. The shards are indexed once at start (their headers and the .cls members),
// so that a truncated shard, a sample without a label or a label out of range is one clear line
// before training; samples are then read by offset.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/image/transforms.h"
#include "data/sampler.h"

namespace vitddp {

// Whether `spec` names shards: a .tar file, a brace pattern "DIR/train-{000..127}.tar", or a
// folder holding .tar files.
bool names_tar_shards(const std::string& spec);
// The shard files of `spec`, in order (a folder's .tar files sorted by name; a brace range
// expanded with its zero padding). Throws one line when one is missing or none is found.
std::vector<std::string> expand_shard_spec(const std::string& spec);

class TarShardDataset final : public Dataset {
 public:
  TarShardDataset(const std::vector<std::string>& shards, std::shared_ptr<const ImageTransform> transform);
  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  Shape image_shape() const override { return {3, transform_->size(), transform_->size()}; }
  int64_t num_classes() const override { return max_label_ + 1; }
  void get(int64_t index, float* image_out, int64_t* label_out) const override;
  void get_drawn(int64_t index, uint64_t draw, float* image_out, int64_t* label_out) const override;
  std::string sample_name(int64_t index) const override;  // "SHARD:KEY"
  // Samples of shard s are [shard_first(s), shard_first(s) + shard_samples(s)).
  int shards() const { return static_cast<int>(shard_paths_.size()); }
  int64_t shard_first(int s) const { return shard_first_.at(static_cast<size_t>(s)); }
  int64_t shard_samples(int s) const { return shard_count_.at(static_cast<size_t>(s)); }
  int64_t label_of(int64_t index) const { return samples_.at(static_cast<size_t>(index)).label; }

 private:
  struct Sample {
    int shard = 0;
    int64_t offset = 0, bytes = 0;  // the image member's data
    int64_t label = 0;
    std::string key;
  };
  void index_shard(int s);
  std::vector<std::string> shard_paths_;
  std::vector<int64_t> shard_first_, shard_count_;
  std::vector<Sample> samples_;
  std::shared_ptr<const ImageTransform> transform_;
  int64_t max_label_ = -1;
};

// Note [Shard streams]
// Decision: each rank reads whole shards, front to back, as WebDataset does: epoch e shuffles
// the shards by (seed, e) and rank r takes every world-th of them from the r-th; their samples,
// in shard order, pass through a shuffle buffer of kShuffleBuffer samples drawn by (seed, e, r).
// Every rank's epoch has total / world samples (the same step count on every rank): a rank whose
// shards hold more drops the rest of its stream this epoch (a later epoch gives those shards to
// another rank), one whose shards hold fewer wraps around its stream. The order is a function of
// (seed, epoch, rank) alone, so a resumed run reads what the uninterrupted one would have.
class ShardStreamOrder final : public SampleOrder {
 public:
  static constexpr int64_t kShuffleBuffer = 1000;
  // `shard_first`, `shard_samples`: each shard's first sample index and sample count.
  ShardStreamOrder(std::vector<int64_t> shard_first, std::vector<int64_t> shard_samples, uint64_t seed, int rank,
                   int world_size, bool shuffle = true);
  int64_t num_samples() const override { return num_samples_; }
  std::vector<int64_t> indices_of(int64_t epoch) const override;

 private:
  std::vector<int64_t> first_, count_;
  uint64_t seed_;
  int rank_, world_;
  bool shuffle_;
  int64_t num_samples_ = 0;
};

}  // namespace vitddp
