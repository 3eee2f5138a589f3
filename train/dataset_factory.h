// The dataset a training run's flags name (--data synthetic / learnable / a .safetensors file),
// shaped for the model: shared by the trainer and `train bench loader`.
#pragma once

#include <memory>

#include "data/dataset.h"
#include "models/vit/vit_config.h"
#include "train/config.h"

namespace vitddp {

// Synthetic datasets hold dataset-size samples (an epoch whatever the run's length); a file's
// images must have the model's shape and its labels fit the model's classes. --data gpu is an
// error here (no dataset: the batches are made on the GPU).
std::unique_ptr<Dataset> make_dataset(const TrainConfig& config, const VitConfig& model);

}  // namespace vitddp
