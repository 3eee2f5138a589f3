// BatchSource: where the trainer's batches come from, already on the training device.
// - CPU: the loader's batches as they are.
// - GPU with a dataset: loader workers fill pinned host buffers ahead of time; each batch is
//   copied on a copy stream while the previous step computes, and the compute stream waits on
//   the copy's event (never the host).
// - GPU with --data gpu: the batch is generated on the GPU, on the compute stream.
#pragma once

#include <memory>
#include <string>

#include "data/dataset.h"
#include "data/loader.h"
#include "framework/core/tensor.h"

namespace vitddp {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // The next (images (B, C, H, W) f32, labels (B) i64 or soft targets (B, classes) f32) on the device.
  virtual Batch next() = 0;
  // Loader throughput (images/s it delivered), or 0 when no loader runs.
  virtual double loader_images_per_second() const { return 0.0; }
  // Distinct bad samples the loader skipped (Note [Bad samples]).
  virtual int64_t bad_samples() const { return 0; }
};

struct BatchSourceOptions {
  Device device;
  int64_t batch_size = 32;
  int workers = 4;
  uint64_t seed = 0;             // --data gpu's images
  uint64_t seed_for_draws = 0;   // the random transforms' (the same on every rank: --seed)
  bool generate_on_gpu = false;  // --data gpu
  int64_t start_step = 0;        // to resume: the first next() returns global batch `start_step`
  int64_t max_bad_samples = 0;   // Note [Bad samples] in data/loader.h
  std::shared_ptr<const BatchMixing> mixing;  // Mixup / CutMix of the loader's batches, or null
  // For generate_on_gpu: the image shape (C, H, W) and number of classes.
  Shape image_shape;
  int64_t num_classes = 0;
};

// `dataset` (null for generate_on_gpu) must outlive the source. Bad samples are told on stderr,
// naming the file.
std::unique_ptr<BatchSource> make_batch_source(const Dataset* dataset, std::shared_ptr<const SampleOrder> order,
                                               const BatchSourceOptions& options);

}  // namespace vitddp
