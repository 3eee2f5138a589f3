// Bilinear resizing as PIL's Image.resize(size, BILINEAR, box) does it, which torchvision's
// Resize and RandomResizedCrop call on PIL images: a triangle filter widened by the downscale
// factor (antialiased), separable, horizontal pass first, with PIL's 22-bit fixed-point weights
// and rounding, so that the 8-bit result is PIL's to the bit on the same input pixels.
#pragma once

#include "data/image/image.h"

namespace vitddp {

// The source region to resize, in source pixels (fractional where a DCT-scaled decode stands in
// for the full image).
struct ResampleBox {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// The window [left, left + width) x [top, top + height) of `src`'s `box` resized to
// out_width x out_height. The window lets a center crop compute only the pixels it keeps; every
// pixel is the one the whole resize would give.
struct ResampleWindow {
  int left = 0, top = 0, width = 0, height = 0;
};

RgbImage resample_bilinear(const RgbImage& src, const ResampleBox& box, int out_width, int out_height,
                           const ResampleWindow& window);

}  // namespace vitddp
