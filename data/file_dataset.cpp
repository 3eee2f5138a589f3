#include "data/file_dataset.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "framework/core/error.h"
#include "framework/io/safetensors.h"

namespace vitddp {

FileDataset::FileDataset(const std::string& path, int64_t num_classes) : path_(path) {
  SafetensorsFile file = read_safetensors(path);
  for (const auto& [name, t] : file.tensors)
    VITDDP_CHECK(name == "images" || name == "labels", path, ": unexpected tensor '", name,
                 "' (a dataset file holds only 'images' and 'labels')");
  const Tensor* images = file.find("images");
  const Tensor* labels = file.find("labels");
  VITDDP_CHECK(images, path, ": no tensor 'images' (expected F32[N, C, H, W])");
  VITDDP_CHECK(labels, path, ": no tensor 'labels' (expected I64[N])");
  VITDDP_CHECK(images->dtype() == DType::kF32 && images->dim() == 4, path, ": 'images' is ",
               safetensors_dtype_name(images->dtype()), shape_str(images->shape()), ", expected F32[N, C, H, W]");
  VITDDP_CHECK(labels->dtype() == DType::kI64 && labels->dim() == 1, path, ": 'labels' is ",
               safetensors_dtype_name(labels->dtype()), shape_str(labels->shape()), ", expected I64[N]");
  const int64_t n = images->size(0);
  VITDDP_CHECK(labels->size(0) == n, path, ": 'images' has ", n, " samples but 'labels' has ", labels->size(0));
  VITDDP_CHECK(n > 0, path, ": the dataset is empty");
  VITDDP_CHECK(images->size(1) > 0 && images->size(2) > 0 && images->size(3) > 0, path, ": 'images' shape ",
               shape_str(images->shape()), " has an empty image dimension");
  VITDDP_CHECK(num_classes >= 0, path, ": num_classes must be >= 0 (0 = infer), got ", num_classes);
  auto meta = file.metadata.find("num_classes");
  if (num_classes == 0 && meta != file.metadata.end()) {
    char* end = nullptr;
    const long long v = std::strtoll(meta->second.c_str(), &end, 10);
    VITDDP_CHECK(!meta->second.empty() && *end == '\0' && v > 0, path, ": metadata num_classes '", meta->second,
                 "' is not a positive integer");
    num_classes = v;
  }
  const int64_t* l = labels->data<int64_t>();
  int64_t max_label = -1;
  for (int64_t i = 0; i < n; ++i) {
    VITDDP_CHECK(l[i] >= 0, path, ": label ", l[i], " of sample ", i, " is negative");
    VITDDP_CHECK(num_classes == 0 || l[i] < num_classes, path, ": label ", l[i], " of sample ", i,
                 " is out of range for ", num_classes, " classes");
    max_label = std::max(max_label, l[i]);
  }
  num_classes_ = num_classes > 0 ? num_classes : max_label + 1;
  images_ = *images;
  labels_ = *labels;
}

void FileDataset::get(int64_t index, float* image_out, int64_t* label_out) const {
  VITDDP_CHECK(index >= 0 && index < size(), path_, ": sample index ", index, " out of range [0, ", size(), ")");
  const int64_t per = image_numel();
  std::memcpy(image_out, images_.data<float>() + index * per, static_cast<size_t>(per) * sizeof(float));
  *label_out = labels_.data<int64_t>()[index];
}

void save_dataset(const Dataset& dataset, const std::string& path) {
  const int64_t n = dataset.size();
  const Shape s = dataset.image_shape();
  Tensor images = Tensor::empty({n, s[0], s[1], s[2]}, DType::kF32);
  Tensor labels = Tensor::empty({n}, DType::kI64);
  const int64_t per = dataset.image_numel();
  for (int64_t i = 0; i < n; ++i) dataset.get(i, images.data<float>() + i * per, labels.data<int64_t>() + i);
  write_safetensors(path, {{"images", images}, {"labels", labels}},
                    {{"format", "vitddp-dataset"}, {"num_classes", std::to_string(dataset.num_classes())}});
}

}  // namespace vitddp
