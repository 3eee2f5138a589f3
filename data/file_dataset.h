// FileDataset: a whole dataset held in memory, read from a safetensors file with exactly two
// tensors, "images" F32[N, C, H, W] and "labels" I64[N], labels in [0, num_classes).
#pragma once

#include <cstdint>
#include <string>

#include "data/dataset.h"

namespace vitddp {

class FileDataset : public Dataset {
 public:
  // num_classes = 0: the file's metadata "num_classes" if present, else max label + 1.
  // Every label must be below num_classes.
  explicit FileDataset(const std::string& path, int64_t num_classes = 0);

  int64_t size() const override { return images_.size(0); }
  Shape image_shape() const override { return {images_.size(1), images_.size(2), images_.size(3)}; }
  int64_t num_classes() const override { return num_classes_; }
  void get(int64_t index, float* image_out, int64_t* label_out) const override;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  Tensor images_;
  Tensor labels_;
  int64_t num_classes_ = 0;
};

// Writes every sample of `dataset` to `path` in the FileDataset format (crash-safe).
void save_dataset(const Dataset& dataset, const std::string& path);

}  // namespace vitddp
