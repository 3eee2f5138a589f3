#include "data/image/resample.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace vitddp {
namespace {

// PIL's Resample.c: PRECISION_BITS = 32 - 8 - 2.
constexpr int kPrecisionBits = 22;

double triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// The weights of each output pixel in [first, first + count): its first source pixel, how many,
// and their fixed-point weights (PIL's precompute_coeffs and normalize_coeffs_8bpc).
struct Coefficients {
  int ksize = 0;
  std::vector<int> start, count;
  std::vector<int> weights;  // (outputs, ksize)
};

Coefficients coefficients(int in_size, double in0, double in1, int out_size, int first, int outputs) {
  const double scale = (in1 - in0) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;  // bilinear's support is 1
  Coefficients c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.start.resize(outputs);
  c.count.resize(outputs);
  c.weights.assign(static_cast<size_t>(outputs) * c.ksize, 0);
  std::vector<double> k(c.ksize);
  for (int o = 0; o < outputs; ++o) {
    const int xx = first + o;
    const double center = in0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);  // truncation toward zero, as C's (int)
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      k[x] = triangle((x + xmin - center + 0.5) * ss);
      ww += k[x];
    }
    for (int x = 0; x < xmax; ++x) {
      const double w = ww != 0.0 ? k[x] / ww : k[x];
      c.weights[static_cast<size_t>(o) * c.ksize + x] =
          static_cast<int>(w < 0 ? w * (1 << kPrecisionBits) - 0.5 : w * (1 << kPrecisionBits) + 0.5);
    }
    c.start[o] = xmin;
    c.count[o] = xmax;
  }
  return c;
}

inline uint8_t clip8(int v) {
  v >>= kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

}  // namespace

RgbImage resample_bilinear(const RgbImage& src, const ResampleBox& box, int out_width, int out_height,
                           const ResampleWindow& w) {
  VITDDP_ASSERT(out_width > 0 && out_height > 0 && w.left >= 0 && w.top >= 0 && w.width > 0 && w.height > 0 &&
                    w.left + w.width <= out_width && w.top + w.height <= out_height,
                "resample: bad output window");
  const Coefficients horiz = coefficients(src.width, box.x0, box.x1, out_width, w.left, w.width);
  const Coefficients vert = coefficients(src.height, box.y0, box.y1, out_height, w.top, w.height);
  // PIL skips a pass whose output is its input; its weights would be exactly 1 there anyway,
  // except for the rounding of a 1.0 weight, which is exact too.
  const int row_first = vert.start.front();
  const int row_last = vert.start.back() + vert.count.back();
  // Horizontal pass over the source rows the vertical pass reads.
  const int rows = row_last - row_first;
  std::vector<uint8_t> temp(static_cast<size_t>(rows) * w.width * 3);
  for (int y = 0; y < rows; ++y) {
    const uint8_t* in = src.pixels.data() + static_cast<size_t>(row_first + y) * src.width * 3;
    uint8_t* out = temp.data() + static_cast<size_t>(y) * w.width * 3;
    for (int o = 0; o < w.width; ++o) {
      const int* k = horiz.weights.data() + static_cast<size_t>(o) * horiz.ksize;
      const uint8_t* p = in + static_cast<size_t>(horiz.start[o]) * 3;
      int s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int x = 0; x < horiz.count[o]; ++x) {
        s0 += p[x * 3 + 0] * k[x];
        s1 += p[x * 3 + 1] * k[x];
        s2 += p[x * 3 + 2] * k[x];
      }
      out[o * 3 + 0] = clip8(s0);
      out[o * 3 + 1] = clip8(s1);
      out[o * 3 + 2] = clip8(s2);
    }
  }
  RgbImage dst;
  dst.width = w.width;
  dst.height = w.height;
  dst.pixels.resize(static_cast<size_t>(w.width) * w.height * 3);
  // Vertical pass, a row of sums at a time so the inner loop runs along memory (integer sums:
  // the order does not change them).
  const int row_len = w.width * 3;
  std::vector<int> sums(static_cast<size_t>(row_len));
  for (int o = 0; o < w.height; ++o) {
    const int* k = vert.weights.data() + static_cast<size_t>(o) * vert.ksize;
    const int first = vert.start[o] - row_first;
    std::fill(sums.begin(), sums.end(), 1 << (kPrecisionBits - 1));
    for (int y = 0; y < vert.count[o]; ++y) {
      const uint8_t* in = temp.data() + static_cast<size_t>(first + y) * row_len;
      const int weight = k[y];
      for (int x = 0; x < row_len; ++x) sums[x] += in[x] * weight;
    }
    uint8_t* out = dst.pixels.data() + static_cast<size_t>(o) * row_len;
    for (int x = 0; x < row_len; ++x) out[x] = clip8(sums[x]);
  }
  return dst;
}

}  // namespace vitddp
