// The dataset interface the loader reads from, and the batch it produces.
#pragma once

#include <cstdint>

#include "framework/core/shape.h"
#include "framework/core/tensor.h"

namespace vitddp {

struct Batch {
  Tensor images;  // (B, C, H, W) f32, CPU, contiguous
  Tensor labels;  // (B) i64, CPU, contiguous
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

  int64_t image_numel() const { return shape_numel(image_shape()); }
};

}  // namespace vitddp
