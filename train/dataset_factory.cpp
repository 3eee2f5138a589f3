#include "train/dataset_factory.h"

#include "data/file_dataset.h"
#include "data/synthetic_dataset.h"
#include "framework/core/error.h"

namespace vitddp {

std::unique_ptr<Dataset> make_dataset(const TrainConfig& c, const VitConfig& m, int world) {
  if (c.data == "synthetic" || c.data == "learnable") {
    // One sample per image the run draws, unless --dataset-size says otherwise; the sampler keeps
    // an index per sample, so the size is bounded (a bad-input line, not an allocation failure).
    const double drawn = static_cast<double>(c.warmup + c.steps) * static_cast<double>(c.batch_size) * world;
    VITDDP_CHECK(c.dataset_size > 0 || drawn <= static_cast<double>(kMaxDatasetSize), "the run draws ", drawn,
                 " images, more than a synthetic dataset holds (", kMaxDatasetSize,
                 "): pass --dataset-size to reuse fewer, or train for fewer steps");
    int64_t size = c.dataset_size > 0 ? c.dataset_size : static_cast<int64_t>(drawn);
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
