// Image decoding: JPEG with libjpeg-turbo (its TurboJPEG API), PNG with libpng, told apart by
// their first bytes, not by the file name. Decoding is thread-safe (a decoder per call or per
// thread). Anything that is not a whole JPEG or PNG throws BadSample.
#pragma once

#include <cstddef>
#include <cstdint>

#include "data/image/image.h"

namespace vitddp {

enum class ImageFormat { kJpeg, kPng, kUnknown };

ImageFormat sniff_image_format(const uint8_t* data, size_t size);

// The image's size without decoding it (JPEG and PNG headers).
struct ImageSize {
  int width = 0;
  int height = 0;
};
ImageSize read_image_size(const uint8_t* data, size_t size);

// Decodes to RGB (grayscale expanded, alpha dropped, 16-bit PNG channels cut to their high byte,
// as PIL's convert("RGB")). `min_width` x `min_height`: the smallest size the caller needs of the
// whole image; a JPEG is decoded at the smallest of libjpeg-turbo's DCT scalings 1/8, 1/4, 1/2
// and 1 that keeps both (0: full size). `scale_out` receives the scaling used (decoded width / full width).
RgbImage decode_image(const uint8_t* data, size_t size, int min_width = 0, int min_height = 0,
                      double* scale_out = nullptr);

}  // namespace vitddp
