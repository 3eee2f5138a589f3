#include "train/dataset_factory.h"

#include "data/file_dataset.h"
#include "data/synthetic_dataset.h"
#include "framework/core/error.h"

namespace vitddp {

std::unique_ptr<Dataset> make_dataset(const TrainConfig& c, const VitConfig& m) {
  if (c.data == "synthetic" || c.data == "learnable") {
    const int64_t size = c.dataset_size;  // fixed, so that the images do not depend on --steps
    auto kind = c.data == "synthetic" ? SyntheticKind::kRandom : SyntheticKind::kLearnable;
    return std::make_unique<SyntheticDataset>(size, m.in_channels, m.image_size, m.image_size, m.num_classes,
                                              c.seed, kind);
  }
  VITDDP_CHECK(c.data != "gpu", "--data gpu makes batches on the GPU: it needs a CUDA device");
  auto ds = std::make_unique<FileDataset>(c.data);
  Shape want{m.in_channels, m.image_size, m.image_size};
  VITDDP_CHECK(ds->image_shape() == want, c.data, ": images are ", shape_str(ds->image_shape()),
               " but the model takes ", shape_str(want));
  VITDDP_CHECK(ds->num_classes() <= m.num_classes, c.data, ": labels go up to ", ds->num_classes() - 1,
               " but the model has ", m.num_classes, " classes");
  return ds;
}

}  // namespace vitddp
