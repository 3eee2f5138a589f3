// SyntheticDataset: images and labels computed from (seed, index) alone, so every worker thread
// and every rank produces the same sample for the same index, and nothing is stored.
//
//   kRandom:    pixels ~ N(0, 1), label ~ uniform over the classes. Nothing to learn; for
//               throughput measurements.
//   kLearnable: label ~ uniform; image = signal * pattern[label] + N(0, noise^2), where
//               pattern[c] ~ N(0, 1) per pixel is fixed by (seed, c). A small model learns it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace vitddp {

enum class SyntheticKind { kRandom, kLearnable };

// "random" or "learnable"; throws on anything else.
SyntheticKind parse_synthetic_kind(const std::string& text);
const char* synthetic_kind_name(SyntheticKind kind);

class SyntheticDataset : public Dataset {
 public:
  SyntheticDataset(int64_t size, int64_t channels, int64_t height, int64_t width, int64_t num_classes,
                   uint64_t seed, SyntheticKind kind = SyntheticKind::kRandom, double signal = 1.0,
                   double noise = 0.5);

  int64_t size() const override { return size_; }
  Shape image_shape() const override { return {channels_, height_, width_}; }
  int64_t num_classes() const override { return num_classes_; }
  void get(int64_t index, float* image_out, int64_t* label_out) const override;

  SyntheticKind kind() const { return kind_; }
  // The class pattern of kLearnable (C*H*W floats), for tests.
  std::vector<float> class_pattern(int64_t label) const;

 private:
  void write_pattern(int64_t label, float* out) const;  // N(0, 1) per pixel

  int64_t size_, channels_, height_, width_, num_classes_;
  uint64_t seed_;
  SyntheticKind kind_;
  double signal_, noise_;
  std::vector<float> patterns_;  // cached class patterns when they fit (kLearnable)
};

}  // namespace vitddp
