#include "data/synthetic_dataset.h"

#include <cmath>

#include "framework/core/error.h"
#include "framework/core/random.h"

namespace vitddp {

namespace {

constexpr uint64_t kPatternStream = 0x5eed'ba77'e4a5'0001ull;
constexpr int64_t kMaxCachedPatternFloats = int64_t{16} << 20;  // 64 MB

// out[i] = scale * N(0, 1) (or out[i] += ... when `add`): Box-Muller in f32 on two 24-bit
// uniforms from one 64-bit draw, two normals per draw (about twice as fast as f64 math; the
// tails are cut at 5.9 sigma, fine for synthetic data).
void normals(Generator& gen, float* out, int64_t n, float scale, bool add) {
  for (int64_t i = 0; i < n; i += 2) {
    const uint64_t bits = gen.next_u64();
    const float u1 = (static_cast<float>(bits >> 40) + 0.5f) * 0x1.0p-24f;  // (0, 1)
    const float u2 = static_cast<float>(bits & 0xffffff) * 0x1.0p-24f;      // [0, 1)
    const float r = std::sqrt(-2.0f * std::log(u1)) * scale;
    const float a = 6.28318530717958647692f * u2;
    const float z0 = r * std::cos(a);
    if (add) out[i] += z0;
    else out[i] = z0;
    if (i + 1 < n) {
      const float z1 = r * std::sin(a);
      if (add) out[i + 1] += z1;
      else out[i + 1] = z1;
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
