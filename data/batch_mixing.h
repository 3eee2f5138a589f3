// Mixup and CutMix of a whole batch, as torchvision.transforms.v2's MixUp and CutMix define
// them: the batch is mixed with itself rolled by one sample, and its one-hot labels by the same
// weights, so the loss sees soft targets (B, classes) f32.
//   Mixup:  x[i] <- lam x[i] + (1 - lam) x[i-1],                       lam ~ Beta(a, a)
//   CutMix: the box of sides sqrt(1 - lam) (W, H) around a uniform centre, clipped to the image,
//           is pasted from x[i-1]; the targets take the area actually pasted (lam adjusted).
// With both alphas set, each batch takes one of the two with probability 1/2 (torchvision's
// reference script: RandomChoice([MixUp, CutMix])).
//
// The draw of a batch is a function of (seed, step) alone, so a resumed run mixes its batches as
// the uninterrupted one did, whatever the loader's threads.
#pragma once

#include <cstdint>

#include "data/dataset.h"
#include "framework/core/random.h"

namespace vitddp {

struct MixingDraw {
  enum class Kind { kMixup, kCutmix };
  Kind kind = Kind::kMixup;
  double lam = 1.0;           // drawn from Beta(alpha, alpha)
  int64_t centre_x = 0, centre_y = 0;  // CutMix: the box's centre
  // CutMix: the box [x1, x2) x [y1, y2) pasted from the rolled batch, and the weight of the
  // batch's own labels after clipping (1 - box area / image area). Mixup: lam.
  int64_t x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  double target_lam = 1.0;
};

class BatchMixing {
 public:
  // Alphas of 0 turn that kind off; at least one must be positive.
  BatchMixing(double mixup_alpha, double cutmix_alpha, int64_t num_classes, uint64_t seed);

  // The draw for batch `step` of images `height` x `width`.
  MixingDraw draw(int64_t step, int64_t height, int64_t width) const;
  // Mixes `images` (B, C, H, W) f32 in place by `d` and writes the soft targets of `labels` (B)
  // i64 into `targets` (B, num_classes) f32.
  void mix(const MixingDraw& d, Tensor& images, const Tensor& labels, Tensor& targets) const;

  int64_t num_classes() const { return num_classes_; }

 private:
  double mixup_alpha_, cutmix_alpha_;
  int64_t num_classes_;
  uint64_t seed_;
};

// Beta(a, b) from two Gamma draws (Marsaglia and Tsang's method; a shape under 1 is boosted by
// one and corrected by U^(1/a)).
double sample_beta(Generator& gen, double a, double b);

}  // namespace vitddp
