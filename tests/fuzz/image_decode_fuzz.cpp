// libFuzzer target: image decoding and torchvision's presets on untrusted bytes (a JPEG or PNG
// file of a data set). Every input must either decode or throw vitddp::Error (BadSample, which the
// loader skips); anything else (a crash, a sanitizer report, another exception) is a bug.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "data/image/decode.h"
#include "data/image/transforms.h"
#include "framework/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const vitddp::ImageTransform train(true, 24), eval(false, 24);
  std::vector<float> out(3 * 24 * 24);
  try {
    const vitddp::ImageSize s = vitddp::read_image_size(data, size);
    // A bomb's dimensions are refused by the decoder; keep the fuzzer's memory bounded anyway.
    if (static_cast<int64_t>(s.width) * s.height > (int64_t{1} << 22)) return 0;
    train.apply(data, size, /*seed=*/size, out.data());
    eval.apply(data, size, 0, out.data());
  } catch (const vitddp::Error&) {
  }
  return 0;
}
