// An 8-bit RGB image as decoders produce it: rows of width * 3 bytes, top row first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/core/error.h"

namespace vitddp {

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // (height, width, 3)
  const uint8_t* at(int x, int y) const { return pixels.data() + (static_cast<size_t>(y) * width + x) * 3; }
};

// A sample that cannot be used (a corrupt, truncated or non-image file): the loader skips it,
// naming it (data/loader.h); anything else wrong is a plain Error.
class BadSample : public Error {
 public:
  explicit BadSample(const std::string& what) : Error(what, ErrorKind::kUser) {}
};

}  // namespace vitddp
