#include "data/image/transforms.h"

#include <algorithm>
#include <cmath>

#include "data/image/decode.h"
#include "data/image/resample.h"

namespace vitddp {

// Note [Decoding at a DCT scale]
// Decision: libjpeg-turbo decodes a JPEG at 1/2, 1/4 or 1/8 of its size for little more than
// its entropy decoding. The transforms take the smallest of those whose crop keeps at least
// twice the output's pixels in both directions, then resize from it as from the full image (the
// box scaled to the decoded pixels). Measured on scikit-learn's photograph scaled to 2000x1338:
// within 0.32/255 of PIL's full decode per pixel (eval) and 0.25/255 (a train crop), where the
// margin of 1 gave 2.8/255 and the 3/8 .. 7/8 scalings 1.4-1.6/255. Where no scaling applies
// (the crop needs the full resolution, as ImageNet's photographs mostly do), the pixels are
// PIL's and torchvision's exactly.

namespace {

// The decoded crop keeps this many times the output's pixels (Note [Decoding at a DCT scale]).
constexpr double kDctMargin = 2.0;

// The pixels [left, left + width) x [top, top + height) of `img`.
RgbImage crop_pixels(const RgbImage& img, int left, int top, int width, int height) {
  RgbImage out;
  out.width = width;
  out.height = height;
  out.pixels.resize(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y)
    std::copy_n(img.at(left, top + y), static_cast<size_t>(width) * 3, out.pixels.data() + static_cast<size_t>(y) * width * 3);
  return out;
}

// Python's round(): halves to even.
int round_half_even(double x) { return static_cast<int>(std::nearbyint(x)); }

double uniform_in(Generator& gen, double low, double high) { return low + (high - low) * gen.uniform(); }

// A random integer in [low, high), as torch.randint(low, high).
int randint(Generator& gen, int low, int high) {
  return low + static_cast<int>(gen.next_u64() % static_cast<uint64_t>(high - low));
}

}  // namespace

CropDraw draw_random_resized_crop(int width, int height, Generator& gen, double min_scale) {
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(3.0 / 4.0), log_hi = std::log(4.0 / 3.0);
  CropDraw c;
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * uniform_in(gen, min_scale, 1.0);
    const double aspect = std::exp(uniform_in(gen, log_lo, log_hi));
    const int w = round_half_even(std::sqrt(target_area * aspect));
    const int h = round_half_even(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      c.top = randint(gen, 0, height - h + 1);
      c.left = randint(gen, 0, width - w + 1);
      c.height = h;
      c.width = w;
      c.flip = gen.uniform() < 0.5;
      return c;
    }
  }
  const double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < 3.0 / 4.0) {
    h = round_half_even(w / (3.0 / 4.0));
  } else if (in_ratio > 4.0 / 3.0) {
    w = round_half_even(h * (4.0 / 3.0));
  }
  c.top = (height - h) / 2;
  c.left = (width - w) / 2;
  c.height = h;
  c.width = w;
  c.flip = gen.uniform() < 0.5;
  return c;
}

int eval_resize_for(int size) { return static_cast<int>(std::floor(size * 256.0 / 224.0 + 0.5)); }

ImageTransform::ImageTransform(bool train, int size, double min_scale, bool flip, Normalization norm)
    : train_(train), size_(size), resize_(eval_resize_for(size)), min_scale_(min_scale), flip_(flip), norm_(norm) {
  VITDDP_CHECK(size > 0 && size <= 4096, "image transform: size must be in [1, 4096], got ", size);
  VITDDP_CHECK(min_scale > 0 && min_scale <= 1, "image transform: the crop's smallest area share must be in (0, 1], "
               "got ", min_scale);
}

void ImageTransform::write_normalized(const RgbImage& img, bool flip, float* out) const {
  const int n = size_ * size_;
  for (int y = 0; y < size_; ++y)
    for (int x = 0; x < size_; ++x) {
      const uint8_t* p = img.at(flip ? size_ - 1 - x : x, y);
      for (int c = 0; c < 3; ++c)
        out[c * n + y * size_ + x] = (static_cast<float>(p[c]) / 255.0f - norm_.mean[c]) / norm_.std[c];
    }
}

void ImageTransform::apply_crop(const uint8_t* data, size_t bytes, const CropDraw& crop, float* out) const {
  const ImageSize full = read_image_size(data, bytes);
  VITDDP_ASSERT(crop.width > 0 && crop.height > 0 && crop.left >= 0 && crop.top >= 0 &&
                    crop.left + crop.width <= full.width && crop.top + crop.height <= full.height,
                "crop outside the image");
  // The whole image at a scale that keeps kDctMargin times size_ pixels across the crop.
  const int min_w = static_cast<int>(std::ceil(kDctMargin * full.width * size_ / crop.width));
  const int min_h = static_cast<int>(std::ceil(kDctMargin * full.height * size_ / crop.height));
  double scale = 1;
  const RgbImage img = decode_image(data, bytes, min_w, min_h, &scale);
  RgbImage cropped;
  ResampleBox box;
  if (scale == 1) {
    // PIL's crop, then its resize: the filter stops at the crop's edges.
    cropped = crop_pixels(img, crop.left, crop.top, crop.width, crop.height);
    box = {0, 0, static_cast<double>(crop.width), static_cast<double>(crop.height)};
  } else {
    const double sx = static_cast<double>(img.width) / full.width, sy = static_cast<double>(img.height) / full.height;
    box = {crop.left * sx, crop.top * sy, (crop.left + crop.width) * sx, (crop.top + crop.height) * sy};
  }
  write_normalized(resample_bilinear(scale == 1 ? cropped : img, box, size_, size_, {0, 0, size_, size_}), crop.flip,
                   out);
}

void ImageTransform::apply(const uint8_t* data, size_t bytes, uint64_t seed, float* out) const {
  const ImageSize full = read_image_size(data, bytes);
  if (train_) {
    Generator gen(seed);
    CropDraw crop = draw_random_resized_crop(full.width, full.height, gen, min_scale_);
    crop.flip = crop.flip && flip_;
    apply_crop(data, bytes, crop, out);
    return;
  }
  // Resize the shorter side to resize_ (torchvision: the longer to int(resize_ * long / short)).
  int new_w = resize_, new_h = resize_;
  if (full.width <= full.height)
    new_h = static_cast<int>(static_cast<double>(resize_) * full.height / full.width);
  else
    new_w = static_cast<int>(static_cast<double>(resize_) * full.width / full.height);
  const RgbImage img = decode_image(data, bytes, static_cast<int>(std::ceil(kDctMargin * new_w)),
                                    static_cast<int>(std::ceil(kDctMargin * new_h)));
  // CenterCrop: the offsets Python rounds, of the resized image (never smaller than the crop).
  const int top = round_half_even((new_h - size_) / 2.0), left = round_half_even((new_w - size_) / 2.0);
  const ResampleBox box{0, 0, static_cast<double>(img.width), static_cast<double>(img.height)};
  write_normalized(resample_bilinear(img, box, new_w, new_h, {left, top, size_, size_}), false, out);
}

}  // namespace vitddp
