// The dataset interface the loader reads from, and the batch it produces.
#pragma once

#include <cstdint>
#include <string>

#include "framework/core/shape.h"
#include "framework/core/tensor.h"

namespace vitddp {

struct Batch {
  Tensor images;  // (B, C, H, W) f32, CPU, contiguous
  Tensor labels;  // (B) i64, or soft targets (B, classes) f32 under Mixup/CutMix; CPU, contiguous
  int64_t epoch = 0;  // sampler epoch the batch was drawn from
  int64_t step = 0;   // global batch number of the loader (0, 1, 2, ... across epochs)
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Shape image_shape() const = 0;  // {C, H, W}
  virtual int64_t num_classes() const = 0;
  // Writes sample `index` (0 <= index < size()) as C*H*W floats in (C, H, W) order and its label.
  // Must be thread-safe: loader workers call it concurrently.
  virtual void get(int64_t index, float* image_out, int64_t* label_out) const = 0;
  // The sample as the loader asks for it in an epoch: `draw` seeds its random transform (the
  // loader derives it from its seed, the epoch and the index, so it does not depend on the
  // workers). Datasets without random transforms ignore it. May throw BadSample
  // (data/image/image.h) for a sample that cannot be used, which the loader skips.
  virtual void get_drawn(int64_t index, uint64_t draw, float* image_out, int64_t* label_out) const {
    (void)draw;
    get(index, image_out, label_out);
  }
  // What to call sample `index` in a message: its file, or "sample N".
  virtual std::string sample_name(int64_t index) const { return "sample " + std::to_string(index); }

  int64_t image_numel() const { return shape_numel(image_shape()); }
};

}  // namespace vitddp
