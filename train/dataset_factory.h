// The data a run's flags name, shaped for the model, with the order each rank reads it in:
// shared by the trainer, its evaluation and `train bench loader`.
//
//   synthetic, learnable   made from the seed (dataset-size samples: an epoch whatever the
//                          run's length), DistributedSampler order
//   FILE.safetensors       images and labels in memory, DistributedSampler order
//   tar shards             WebDataset layout (data/tar_shards.h), each rank whole shards
//                          (Note [Shard streams])
//   a folder               torchvision's ImageFolder (data/image_folder.h), DistributedSampler
// Image files take torchvision's train preset for training and its eval preset for evaluation,
// at the model's image size. Labels must fit the model's classes; anything wrong is one line.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/sampler.h"
#include "models/vit/vit_config.h"
#include "train/config.h"

namespace vitddp {

struct DataSource {
  std::unique_ptr<Dataset> dataset;
  std::shared_ptr<const SampleOrder> order;  // this rank's
  std::vector<std::string> classes;          // an image folder's class names (else empty)
  std::string kind;                          // "synthetic", "tensors", "shards", "image folder"
};

// Whether `spec` names image files to decode (a folder or tar shards), not tensors or synthetic.
bool decodes_images(const std::string& spec);

// Note [Bad samples] as every loader of a run applies it: at most bad-sample-limit of the set's
// samples may be bad, and each is told on stderr by name.
int64_t bad_sample_allowance(const TrainConfig& config, const Dataset& dataset);
void warn_of_bad_sample(const std::string& what);

// --data for rank `rank` of `world`. --data gpu is an error here (its batches are made on the GPU).
DataSource make_train_data(const TrainConfig& config, const VitConfig& model, int rank, int world);
// --eval-data: every sample once over the ranks (StridedOrder), the eval preset, an image
// folder labelled by the training folder's `train_classes` when it has them.
DataSource make_eval_data(const TrainConfig& config, const VitConfig& model, int rank, int world,
                          const std::vector<std::string>& train_classes);

}  // namespace vitddp
