#include "data/batch_mixing.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "framework/core/error.h"

namespace vitddp {
namespace {

double sample_gamma(Generator& gen, double shape) {
  if (shape < 1.0) {
    double u = gen.uniform();
    while (u <= 0.0) u = gen.uniform();
    return sample_gamma(gen, shape + 1.0) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = gen.normal();
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = gen.uniform();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (u > 0.0 && std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

}  // namespace

double sample_beta(Generator& gen, double a, double b) {
  VITDDP_CHECK(a > 0 && b > 0, "Beta(", a, ", ", b, "): both parameters must be positive");
  for (;;) {
    const double x = sample_gamma(gen, a), y = sample_gamma(gen, b);
    if (x + y > 0) return x / (x + y);
  }
}

BatchMixing::BatchMixing(double mixup_alpha, double cutmix_alpha, int64_t num_classes, uint64_t seed)
    : mixup_alpha_(mixup_alpha), cutmix_alpha_(cutmix_alpha), num_classes_(num_classes), seed_(seed) {
  VITDDP_CHECK(mixup_alpha >= 0 && cutmix_alpha >= 0 && mixup_alpha + cutmix_alpha > 0,
               "batch mixing needs a positive Mixup or CutMix alpha, got ", mixup_alpha, " and ", cutmix_alpha);
  VITDDP_CHECK(num_classes > 0, "batch mixing needs the number of classes, got ", num_classes);
}

MixingDraw BatchMixing::draw(int64_t step, int64_t height, int64_t width) const {
  Generator gen(mix64(seed_, static_cast<uint64_t>(step)));
  MixingDraw d;
  const bool cutmix = cutmix_alpha_ > 0 && (mixup_alpha_ == 0 || gen.uniform() < 0.5);
  d.kind = cutmix ? MixingDraw::Kind::kCutmix : MixingDraw::Kind::kMixup;
  const double alpha = cutmix ? cutmix_alpha_ : mixup_alpha_;
  d.lam = sample_beta(gen, alpha, alpha);
  d.target_lam = d.lam;
  if (!cutmix) return d;
  d.centre_x = std::min<int64_t>(static_cast<int64_t>(gen.uniform() * width), width - 1);
  d.centre_y = std::min<int64_t>(static_cast<int64_t>(gen.uniform() * height), height - 1);
  const double r = 0.5 * std::sqrt(1.0 - d.lam);
  const int64_t half_w = static_cast<int64_t>(r * width), half_h = static_cast<int64_t>(r * height);
  d.x1 = std::max<int64_t>(d.centre_x - half_w, 0);
  d.y1 = std::max<int64_t>(d.centre_y - half_h, 0);
  d.x2 = std::min<int64_t>(d.centre_x + half_w, width);
  d.y2 = std::min<int64_t>(d.centre_y + half_h, height);
  d.target_lam = 1.0 - static_cast<double>((d.x2 - d.x1) * (d.y2 - d.y1)) / static_cast<double>(width * height);
  return d;
}

void BatchMixing::mix(const MixingDraw& d, Tensor& images, const Tensor& labels, Tensor& targets) const {
  VITDDP_CHECK(images.dim() == 4 && images.dtype() == DType::kF32 && images.is_contiguous() &&
                   images.device().is_cpu(),
               "batch mixing: images must be (B, C, H, W) f32 contiguous on the CPU");
  const int64_t batch = images.shape()[0];
  const int64_t channels = images.shape()[1], height = images.shape()[2], width = images.shape()[3];
  VITDDP_CHECK(labels.shape() == Shape{batch} && labels.dtype() == DType::kI64, "batch mixing: labels must be (",
               batch, ") i64");
  VITDDP_CHECK(targets.shape() == (Shape{batch, num_classes_}) && targets.dtype() == DType::kF32 &&
                   targets.is_contiguous(),
               "batch mixing: targets must be (", batch, ", ", num_classes_, ") f32");
  const int64_t* y = labels.data<int64_t>();
  float* t = targets.data<float>();
  std::fill(t, t + batch * num_classes_, 0.0f);
  const float own = static_cast<float>(d.target_lam), other = static_cast<float>(1.0 - d.target_lam);
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t prev = (i + batch - 1) % batch;
    VITDDP_CHECK(y[i] >= 0 && y[i] < num_classes_, "batch mixing: label ", y[i], " outside [0, ", num_classes_, ")");
    t[i * num_classes_ + y[i]] += own;
    t[i * num_classes_ + y[prev]] += other;
  }
  if (batch < 2) return;  // a batch of one mixes with itself: the image stays
  // x[i] takes from the original x[i-1]: go downwards, keeping the last image for x[0].
  const int64_t per = channels * height * width;
  float* x = images.data<float>();
  std::vector<float> last(x + (batch - 1) * per, x + batch * per);
  const float lam = static_cast<float>(d.lam), rest = static_cast<float>(1.0 - d.lam);
  for (int64_t i = batch - 1; i >= 0; --i) {
    float* dst = x + i * per;
    const float* src = i > 0 ? x + (i - 1) * per : last.data();
    if (d.kind == MixingDraw::Kind::kMixup) {
      for (int64_t k = 0; k < per; ++k) dst[k] = src[k] * rest + dst[k] * lam;
      continue;
    }
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t r = d.y1; r < d.y2; ++r) {
        const int64_t row = (c * height + r) * width;
        std::copy(src + row + d.x1, src + row + d.x2, dst + row + d.x1);
      }
  }
}

}  // namespace vitddp
