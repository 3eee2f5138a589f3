#include "data/synthetic_dataset.h"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>

#include "framework/core/error.h"
#include "framework/core/random.h"

namespace vitddp {

namespace {

constexpr uint64_t kPatternStream = 0x5eed'ba77'e4a5'0001ull;
constexpr int64_t kMaxCachedPatternFloats = int64_t{16} << 20;  // 64 MB

// out[i] = scale * N(0, 1) (or out[i] += ... when `add`): Box-Muller in f32 on two 24-bit
// uniforms from one 64-bit draw, two normals per draw (the tails are cut at 5.9 sigma, fine for
// synthetic data). The draws are scalar; log, sqrt, sin and cos run on Eigen arrays of a few
// hundred pairs, in SIMD, measured well ahead of the scalar loop (docs/performance.md, "What
// was tried, in order"): the loader has to outrun a GPU step.
void normals(Generator& gen, float* out, int64_t n, float scale, bool add) {
  constexpr int kPairs = 256;
  Eigen::Array<float, kPairs, 1> u1, u2;
  for (int64_t i = 0; i < n; i += 2 * kPairs) {
    const int pairs = static_cast<int>(std::min<int64_t>(kPairs, (n - i + 1) / 2));
    for (int k = 0; k < pairs; ++k) {
      const uint64_t bits = gen.next_u64();
      u1[k] = (static_cast<float>(bits >> 40) + 0.5f) * 0x1.0p-24f;  // (0, 1)
      u2[k] = static_cast<float>(bits & 0xffffff) * 0x1.0p-24f;      // [0, 1)
    }
    for (int k = pairs; k < kPairs; ++k) u1[k] = u2[k] = 0.5f;  // a short last chunk: unused lanes
    const Eigen::Array<float, kPairs, 1> r = (-2.0f * u1.log()).sqrt() * scale;
    const Eigen::Array<float, kPairs, 1> angle = 6.28318530717958647692f * u2;
    const Eigen::Array<float, kPairs, 1> z0 = r * angle.cos(), z1 = r * angle.sin();
    for (int k = 0; k < pairs; ++k) {
      const int64_t at = i + 2 * k;
      if (add) {
        out[at] += z0[k];
        if (at + 1 < n) out[at + 1] += z1[k];
      } else {
        out[at] = z0[k];
        if (at + 1 < n) out[at + 1] = z1[k];
      }
    }
  }
}

}  // namespace

SyntheticKind parse_synthetic_kind(const std::string& text) {
  if (text == "random") return SyntheticKind::kRandom;
  if (text == "learnable") return SyntheticKind::kLearnable;
  throw Error("unknown synthetic dataset kind '" + text + "' (expected random or learnable)");
}

const char* synthetic_kind_name(SyntheticKind kind) {
  return kind == SyntheticKind::kRandom ? "random" : "learnable";
}

SyntheticDataset::SyntheticDataset(int64_t size, int64_t channels, int64_t height, int64_t width,
                                   int64_t num_classes, uint64_t seed, SyntheticKind kind, double signal,
                                   double noise)
    : size_(size),
      channels_(channels),
      height_(height),
      width_(width),
      num_classes_(num_classes),
      seed_(seed),
      kind_(kind),
      signal_(signal),
      noise_(noise) {
  VITDDP_CHECK(size > 0, "synthetic dataset: size must be positive, got ", size);
  VITDDP_CHECK(channels > 0 && height > 0 && width > 0, "synthetic dataset: image shape ",
               shape_str({channels, height, width}), " must be positive");
  VITDDP_CHECK(num_classes > 0, "synthetic dataset: num_classes must be positive, got ", num_classes);
  VITDDP_CHECK(noise >= 0 && std::isfinite(noise) && std::isfinite(signal),
               "synthetic dataset: noise must be finite and >= 0, signal finite");
  const int64_t per = image_numel();
  if (kind_ == SyntheticKind::kLearnable && num_classes <= kMaxCachedPatternFloats / per) {
    patterns_.resize(static_cast<size_t>(num_classes * per));
    for (int64_t c = 0; c < num_classes; ++c) write_pattern(c, patterns_.data() + c * per);
  }
}

void SyntheticDataset::write_pattern(int64_t label, float* out) const {
  Generator gen(mix64(mix64(seed_, kPatternStream), static_cast<uint64_t>(label)));
  normals(gen, out, image_numel(), 1.0f, /*add=*/false);
}

std::vector<float> SyntheticDataset::class_pattern(int64_t label) const {
  VITDDP_CHECK(label >= 0 && label < num_classes_, "synthetic dataset: class ", label, " out of range [0, ",
               num_classes_, ")");
  std::vector<float> out(static_cast<size_t>(image_numel()));
  write_pattern(label, out.data());
  return out;
}

void SyntheticDataset::get(int64_t index, float* image_out, int64_t* label_out) const {
  VITDDP_CHECK(index >= 0 && index < size_, "synthetic dataset: index ", index, " out of range [0, ", size_, ")");
  Generator gen(mix64(seed_, static_cast<uint64_t>(index)));
  const int64_t label = static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(num_classes_));
  *label_out = label;
  const int64_t n = image_numel();
  if (kind_ == SyntheticKind::kRandom) {
    normals(gen, image_out, n, 1.0f, /*add=*/false);
    return;
  }
  // The same values whether the pattern is cached or not: pattern in f32, then scaled.
  const float s = static_cast<float>(signal_);
  if (!patterns_.empty()) {
    const float* p = patterns_.data() + label * n;
    for (int64_t i = 0; i < n; ++i) image_out[i] = s * p[i];
  } else {
    write_pattern(label, image_out);
    for (int64_t i = 0; i < n; ++i) image_out[i] *= s;
  }
  if (noise_ > 0) normals(gen, image_out, n, static_cast<float>(noise_), /*add=*/true);
}

}  // namespace vitddp
