// ImageFolderDataset: torchvision's ImageFolder layout, ROOT/CLASS/.../FILE. The classes are the
// sorted names of ROOT's subfolders (label k: the k-th); the samples, class by class, every file
// below the class folder with one of torchvision's image extensions (case-insensitive), folders
// in sorted path order and files sorted within each, as torchvision lists them, so that index i
// is torchvision's sample i. JPEG and PNG files decode; files of the other extensions are bad
// samples (data/loader.h, Note [Bad samples]).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/image/transforms.h"

namespace vitddp {

class ImageFolderDataset final : public Dataset {
 public:
  // Lists `root`; throws one line for a missing folder, no class folders or a class without a
  // single image file. `classes`: label by these names instead of the folder's own (an eval set
  // labelled as its training set; a folder name not among them is an error).
  ImageFolderDataset(const std::string& root, std::shared_ptr<const ImageTransform> transform,
                     const std::vector<std::string>& classes = {});
  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  Shape image_shape() const override { return {3, transform_->size(), transform_->size()}; }
  int64_t num_classes() const override { return static_cast<int64_t>(classes_.size()); }
  void get(int64_t index, float* image_out, int64_t* label_out) const override;
  void get_drawn(int64_t index, uint64_t draw, float* image_out, int64_t* label_out) const override;
  std::string sample_name(int64_t index) const override;
  const std::vector<std::string>& classes() const { return classes_; }
  int64_t label_of(int64_t index) const { return labels_.at(static_cast<size_t>(index)); }

 private:
  std::string root_;
  std::shared_ptr<const ImageTransform> transform_;
  std::vector<std::string> classes_;
  std::vector<std::string> files_;  // paths below root_
  std::vector<int64_t> labels_;
};

// Reads a whole file; throws BadSample when it cannot be read.
std::vector<uint8_t> read_sample_file(const std::string& path);

}  // namespace vitddp
