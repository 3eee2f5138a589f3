#include "train/dataset_factory.h"

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "data/file_dataset.h"
#include "data/image_folder.h"
#include "data/synthetic_dataset.h"
#include "data/tar_shards.h"
#include "framework/core/error.h"

namespace vitddp {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The dataset `spec` names (`flag`: the flag, for messages), and its kind.
DataSource open_data(const std::string& flag, const std::string& spec, const VitConfig& m, bool train,
                     const TrainConfig& c, const std::vector<std::string>& classes) {
  DataSource d;
  if (spec == "synthetic" || spec == "learnable") {
    auto kind = spec == "synthetic" ? SyntheticKind::kRandom : SyntheticKind::kLearnable;
    // Fixed in size, so that the images do not depend on --steps. Evaluation reads the first
    // samples of the same set (the class patterns are the seed's), at most ImageNet's 50,000.
    const int64_t size = train ? c.dataset_size : std::min<int64_t>(c.dataset_size, 50000);
    d.dataset = std::make_unique<SyntheticDataset>(size, m.in_channels, m.image_size, m.image_size, m.num_classes,
                                                   c.seed, kind);
    d.kind = "synthetic";
    return d;
  }
  VITDDP_CHECK(spec != "gpu", flag, " gpu makes batches on the GPU: it needs a CUDA device",
               train ? "" : ", and it cannot be evaluated on");
  auto transform = std::make_shared<const ImageTransform>(train, static_cast<int>(m.image_size), c.crop_min_scale,
                                                          c.random_flip);
  VITDDP_CHECK(m.in_channels == 3 || ends_with(spec, ".safetensors"), flag, " ", spec, ": image files are RGB; the "
               "model takes ", m.in_channels, " channels");
  std::error_code ec;
  if (ends_with(spec, ".safetensors")) {
    d.dataset = std::make_unique<FileDataset>(spec);
    d.kind = "tensors";
  } else if (names_tar_shards(spec)) {
    d.dataset = std::make_unique<TarShardDataset>(expand_shard_spec(spec), transform);
    d.kind = "shards";
  } else if (std::filesystem::is_directory(spec, ec)) {
    auto folder = std::make_unique<ImageFolderDataset>(spec, transform, classes);
    d.classes = folder->classes();
    d.dataset = std::move(folder);
    d.kind = "image folder";
  } else {
    throw Error(flag + " " + spec + ": no such folder or file (name a folder of class folders, tar shards, a "
                ".safetensors file, or synthetic, learnable, gpu)");
  }
  const Shape want{m.in_channels, m.image_size, m.image_size};
  VITDDP_CHECK(d.dataset->image_shape() == want, flag, " ", spec, ": images are ", shape_str(d.dataset->image_shape()),
               " but the model takes ", shape_str(want));
  VITDDP_CHECK(d.dataset->num_classes() <= m.num_classes, flag, " ", spec, ": labels go up to ",
               d.dataset->num_classes() - 1, " but the model has ", m.num_classes, " classes (--set classes=",
               d.dataset->num_classes(), " gives it as many)");
  return d;
}

}  // namespace

int64_t bad_sample_allowance(const TrainConfig& config, const Dataset& dataset) {
  return static_cast<int64_t>(config.bad_sample_limit * static_cast<double>(dataset.size()));
}

void warn_of_bad_sample(const std::string& what) { std::cerr << "warning: skipped bad sample " << what << "\n"; }

bool decodes_images(const std::string& spec) {
  if (spec == "synthetic" || spec == "learnable" || spec == "gpu" || ends_with(spec, ".safetensors")) return false;
  std::error_code ec;
  return names_tar_shards(spec) || std::filesystem::is_directory(spec, ec);
}

DataSource make_train_data(const TrainConfig& c, const VitConfig& m, int rank, int world) {
  DataSource d = open_data("--data", c.data, m, /*train=*/true, c, {});
  if (auto* shards = dynamic_cast<const TarShardDataset*>(d.dataset.get())) {
    std::vector<int64_t> first, count;
    for (int s = 0; s < shards->shards(); ++s) {
      first.push_back(shards->shard_first(s));
      count.push_back(shards->shard_samples(s));
    }
    d.order = std::make_shared<ShardStreamOrder>(first, count, c.seed, rank, world);
  } else {
    SamplerOptions o;
    o.dataset_size = d.dataset->size();
    o.seed = c.seed;
    o.rank = rank;
    o.world_size = world;
    d.order = std::make_shared<DistributedSampler>(o);
  }
  return d;
}

DataSource make_eval_data(const TrainConfig& c, const VitConfig& m, int rank, int world,
                          const std::vector<std::string>& train_classes) {
  DataSource d = open_data("--eval-data", c.eval_data, m, /*train=*/false, c, train_classes);
  d.order = std::make_shared<StridedOrder>(d.dataset->size(), rank, world);
  return d;
}

}  // namespace vitddp
