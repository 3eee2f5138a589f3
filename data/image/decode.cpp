#include "data/image/decode.h"

#include <png.h>
#include <turbojpeg.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

namespace vitddp {
namespace {

constexpr uint8_t kPngMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

// A TurboJPEG decompressor per thread: creating one costs more than a small image's header.
// After a failed decode the handle is replaced: TurboJPEG stopped on a warning leaves its
// decompressor mid-image, and the next header read from it gives a size of 0.
struct ThreadDecompressor {
  tjhandle h = tjInitDecompress();
  ~ThreadDecompressor() {
    if (h) tjDestroy(h);
  }
  void replace() {
    if (h) tjDestroy(h);
    h = tjInitDecompress();
  }
};

ThreadDecompressor& thread_decompressor() {
  thread_local ThreadDecompressor d;
  if (!d.h) d.replace();
  if (!d.h) throw Error("libjpeg-turbo: cannot create a decompressor");
  return d;
}

// A failed sample's error, the handle replaced for the next one.
BadSample jpeg_failure(ThreadDecompressor& d) {
  BadSample e(std::string("corrupt JPEG (") + tjGetErrorStr2(d.h) + ")");
  d.replace();
  return e;
}

struct JpegHeader {
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
};

JpegHeader jpeg_header(ThreadDecompressor& d, const uint8_t* data, size_t size) {
  JpegHeader j;
  if (tjDecompressHeader3(d.h, data, static_cast<unsigned long>(size), &j.width, &j.height, &j.subsampling,
                          &j.colorspace) != 0)
    throw jpeg_failure(d);
  if (j.width <= 0 || j.height <= 0) throw BadSample("corrupt JPEG (size 0)");
  return j;
}

RgbImage decode_jpeg(const uint8_t* data, size_t size, int min_w, int min_h, double* scale_out) {
  ThreadDecompressor& d = thread_decompressor();
  const JpegHeader j = jpeg_header(d, data, size);
  // The smallest DCT scaling that keeps what the caller needs (factors come largest first).
  int n = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&n);
  tjscalingfactor best{1, 1};
  if (min_w > 0 && min_h > 0) {
    for (int k = 0; k < n; ++k) {
      const tjscalingfactor f = factors[k];
      if (f.num != 1 || f.denom == 1) continue;  // 1/2, 1/4, 1/8: the exact reduced inverse DCTs
      if (TJSCALED(j.width, f) >= min_w && TJSCALED(j.height, f) >= min_h &&
          static_cast<double>(f.num) / f.denom < static_cast<double>(best.num) / best.denom)
        best = f;
    }
  }
  RgbImage img;
  img.width = TJSCALED(j.width, best);
  img.height = TJSCALED(j.height, best);
  const bool cmyk = j.colorspace == TJCS_CMYK || j.colorspace == TJCS_YCCK;
  std::vector<uint8_t> cmyk_pixels;
  uint8_t* out = nullptr;
  int pixel_format = TJPF_RGB;
  if (cmyk) {
    cmyk_pixels.resize(static_cast<size_t>(img.width) * img.height * 4);
    out = cmyk_pixels.data();
    pixel_format = TJPF_CMYK;
  } else {
    img.pixels.resize(static_cast<size_t>(img.width) * img.height * 3);
    out = img.pixels.data();
  }
  // Warnings (a truncated file's "premature end") fail the sample, as PIL's "image file is truncated".
  if (tjDecompress2(d.h, data, static_cast<unsigned long>(size), out, img.width, 0, img.height, pixel_format,
                    TJFLAG_STOPONWARNING) != 0)
    throw jpeg_failure(d);
  if (cmyk) {  // Adobe's inverted CMYK, as PIL converts it: RGB = C K / 255 of the stored values
    img.pixels.resize(static_cast<size_t>(img.width) * img.height * 3);
    for (size_t p = 0; p < static_cast<size_t>(img.width) * img.height; ++p) {
      const unsigned k = cmyk_pixels[p * 4 + 3];
      for (int c = 0; c < 3; ++c) img.pixels[p * 3 + c] = static_cast<uint8_t>(cmyk_pixels[p * 4 + c] * k / 255);
    }
  }
  if (scale_out) *scale_out = static_cast<double>(best.num) / best.denom;
  return img;
}

// libpng reports errors through longjmp: everything the decode changes after setjmp lives in
// the reader, which libpng holds by address (not in registers the jump would restore).
struct PngReader {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t at = 0;
  char message[200] = "";
  RgbImage img;
  std::vector<png_bytep> rows;
};

void png_read_from_memory(png_structp png, png_bytep out, png_size_t count) {
  auto* r = static_cast<PngReader*>(png_get_io_ptr(png));
  if (r->at + count > r->size) png_error(png, "truncated PNG");
  std::memcpy(out, r->data + r->at, count);
  r->at += count;
}

void png_on_error(png_structp png, png_const_charp message) {
  auto* r = static_cast<PngReader*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof r->message, "%s", message);
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}

RgbImage decode_png(const uint8_t* data, size_t size) {
  PngReader reader;
  reader.data = data;
  reader.size = size;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, png_on_error, png_on_warning);
  if (!png) throw Error("libpng: cannot create a reader");
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
    throw BadSample(std::string("corrupt PNG (") + (reader.message[0] ? reader.message : "no memory") + ")");
  }
  png_set_read_fn(png, &reader, png_read_from_memory);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (w == 0 || h == 0 || w > (1u << 16) || h > (1u << 16)) png_error(png, "image size out of range");
  const int color = png_get_color_type(png, info);
  png_set_expand(png);      // palette and low-bit gray to 8-bit, tRNS to alpha
  png_set_strip_16(png);    // 16-bit channels: the high byte
  png_set_strip_alpha(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != static_cast<size_t>(w) * 3) png_error(png, "unexpected row layout");
  RgbImage& img = reader.img;
  img.width = static_cast<int>(w);
  img.height = static_cast<int>(h);
  img.pixels.resize(static_cast<size_t>(w) * h * 3);
  reader.rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) reader.rows[y] = img.pixels.data() + static_cast<size_t>(y) * w * 3;
  png_read_image(png, reader.rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return std::move(img);
}

ImageSize png_size(const uint8_t* data, size_t size) {
  // The IHDR chunk follows the signature: length, "IHDR", width, height (big-endian).
  if (size < 24 || std::memcmp(data + 12, "IHDR", 4) != 0) throw BadSample("corrupt PNG (no IHDR)");
  auto be32 = [](const uint8_t* p) { return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3]; };
  const uint32_t w = be32(data + 16), h = be32(data + 20);
  if (w == 0 || h == 0 || w > (1u << 16) || h > (1u << 16)) throw BadSample("corrupt PNG (size out of range)");
  return {static_cast<int>(w), static_cast<int>(h)};
}

}  // namespace

ImageFormat sniff_image_format(const uint8_t* data, size_t size) {
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) return ImageFormat::kJpeg;
  if (size >= 8 && std::memcmp(data, kPngMagic, 8) == 0) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

ImageSize read_image_size(const uint8_t* data, size_t size) {
  switch (sniff_image_format(data, size)) {
    case ImageFormat::kJpeg: {
      const JpegHeader j = jpeg_header(thread_decompressor(), data, size);
      return {j.width, j.height};
    }
    case ImageFormat::kPng: return png_size(data, size);
    case ImageFormat::kUnknown: break;
  }
  throw BadSample("not a JPEG or PNG image");
}

RgbImage decode_image(const uint8_t* data, size_t size, int min_width, int min_height, double* scale_out) {
  switch (sniff_image_format(data, size)) {
    case ImageFormat::kJpeg: return decode_jpeg(data, size, min_width, min_height, scale_out);
    case ImageFormat::kPng:
      if (scale_out) *scale_out = 1.0;
      return decode_png(data, size);
    case ImageFormat::kUnknown: break;
  }
  throw BadSample("not a JPEG or PNG image");
}

}  // namespace vitddp
