// torchvision's classification presets on one encoded image, written as normalised (C, H, W)
// floats:
//   train  RandomResizedCrop(size, scale (0.08, 1), ratio (3/4, 4/3), bilinear, antialias),
//          RandomHorizontalFlip(0.5), ToTensor, Normalize(ImageNet mean and std)
//   eval   Resize(resize, bilinear, antialias) of the shorter side, CenterCrop(size), ToTensor,
//          Normalize
// The resize is PIL's (data/image/resample.h). A JPEG is decoded at the smallest DCT scaling
// that keeps at least the output's resolution in the crop (Note [Decoding at a DCT scale]).
#pragma once

#include <cstddef>
#include <cstdint>

#include "data/image/image.h"
#include "framework/core/random.h"

namespace vitddp {

struct Normalization {
  float mean[3] = {0.485f, 0.456f, 0.406f};
  float std[3] = {0.229f, 0.224f, 0.225f};
};

// A crop of the full image, in its pixels (torchvision's i, j, h, w), and whether to mirror it.
struct CropDraw {
  int top = 0, left = 0, height = 0, width = 0;
  bool flip = false;
};

// torchvision's RandomResizedCrop.get_params (ten tries at a random area share in
// [min_scale, 1] and aspect ratio, then the central crop of the nearest allowed ratio) and a fair
// coin for the flip.
CropDraw draw_random_resized_crop(int width, int height, Generator& gen, double min_scale = 0.08);

// The eval preset's resize of the shorter side for a model of `size`: torchvision's 256 for 224.
int eval_resize_for(int size);

class ImageTransform {
 public:
  // `train`: the train preset, else eval; `size`: the model's image size; `min_scale`: the
  // train crop's smallest area share (torchvision's 0.08).
  // `flip`: the train preset's random horizontal flip (torchvision's hflip_prob 0.5, or none).
  ImageTransform(bool train, int size, double min_scale = 0.08, bool flip = true, Normalization norm = {});
  // Decodes `data` and writes 3 * size * size floats to `out`; `seed` draws the train preset's
  // crop and flip (ignored by eval). Throws BadSample for what cannot be decoded.
  void apply(const uint8_t* data, size_t bytes, uint64_t seed, float* out) const;
  // The same with the crop given: the train preset with a fixed draw.
  void apply_crop(const uint8_t* data, size_t bytes, const CropDraw& crop, float* out) const;
  bool train() const { return train_; }
  int size() const { return size_; }

 private:
  void write_normalized(const RgbImage& img, bool flip, float* out) const;
  bool train_;
  int size_;
  int resize_;
  double min_scale_;
  bool flip_;
  Normalization norm_;
};

}  // namespace vitddp
