// patch_embed: checks, the autograd node and device dispatch. Computed as patchify (to a
// (B*Np, C*p*p) matrix) + one GEMM with the weight viewed as (D, C*p*p), which equals
// conv2d(kernel = stride = p) followed by .reshape(B, D, Np).permute(0, 2, 1).
// Kernels: cpu/patch_embed.cpp (patchify) and cpu/linear.cpp (the product).
#include "framework/ops/patch_embed.h"

#include "framework/autograd/node.h"
#include "framework/cpu/linear.h"
#include "framework/cpu/patch_embed.h"
#include "framework/ops/dispatch.h"
#include "framework/cuda/patch_embed.h"
#include "framework/cuda/linear.h"
#include "framework/ops/nn_checks.h"

namespace vitddp {
namespace {

using nn_checks::brief;

class PatchEmbedBackward final : public Node {
 public:
  // patches: (B*Np, C*p*p); weight: (D, C*p*p) view of the contiguous weight.
  PatchEmbedBackward(const Tensor& patches, const Tensor& weight_mat, Shape image_shape, Shape weight_shape,
                     int64_t patch)
      : image_shape_(std::move(image_shape)), weight_shape_(std::move(weight_shape)), patch_(patch) {
    save(patches);
    save(weight_mat);
  }
  std::string name() const override { return "PatchEmbedBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& patches = saved(0);
    const Tensor& w = saved(1);
    Tensor dy = grads[0].to(w.dtype()).contiguous();
    Tensor dpatches, dimages;
    if (needs_input_grad(0)) {
      dpatches = Tensor::empty(patches.shape(), w.dtype(), w.device());
      dimages = Tensor::empty(image_shape_, w.dtype(), w.device());
    }
    WeightGrads wg = weight_grads({{1, w.shape()}, {2, {w.size(0)}}}, w.dtype(), w.device());
    const Tensor &dw = wg.tensors[0], &db = wg.tensors[1];
    on_device(
        w.device(), "patch_embed backward",
        [&] {
          cpu::linear_backward(patches, w, dy, dpatches, dw, db, wg.mode);
          if (dimages.defined()) cpu::unpatchify(dpatches, patch_, dimages);
        },
        [&] {
          cuda::linear_backward(patches, w, dy, dpatches, dw, db, wg.mode);
          if (dimages.defined()) cuda::unpatchify(dpatches, patch_, dimages);
        });
    Tensor dw_out = wg.returned(0);
    if (dw_out.defined()) dw_out = dw_out.view_as_shape(weight_shape_);
    return {dimages, dw_out, wg.returned(1)};
  }

 private:
  Shape image_shape_, weight_shape_;
  int64_t patch_;
};

}  // namespace

Tensor patch_embed(const Tensor& images, const Tensor& weight, const Tensor& bias, int64_t patch) {
  const char* op = "patch_embed";
  nn_checks::check_floating(op, "images", images);
  nn_checks::check_defined(op, "weight", weight);
  nn_checks::check_like(op, "weight", weight, "images", images);
  VITDDP_CHECK(images.dim() == 4, "patch_embed: images must be 4-D (B, C, H, W), got ", images.description());
  VITDDP_CHECK(patch > 0, "patch_embed: patch size must be positive, got ", patch);
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  VITDDP_CHECK(H % patch == 0 && W % patch == 0, "patch_embed: patch size ", patch, " does not divide image size ",
               H, "x", W);
  VITDDP_CHECK(weight.dim() == 4 && weight.size(1) == C && weight.size(2) == patch && weight.size(3) == patch,
               "patch_embed: weight ", brief(weight), " does not match images ", brief(images), " and patch ",
               patch, " (need (D, ", C, ", ", patch, ", ", patch, "))");
  const int64_t D = weight.size(0);
  if (bias.defined()) {
    nn_checks::check_like(op, "bias", bias, "images", images);
    VITDDP_CHECK(bias.dim() == 1 && bias.size(0) == D, "patch_embed: bias ", brief(bias), " does not match weight ",
                 brief(weight), " (", D, " output channels)");
  }
  const int64_t np = (H / patch) * (W / patch), cols = C * patch * patch;
  Tensor x = images.contiguous();
  Tensor w = weight.contiguous().view_as_shape({D, cols});
  Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  Tensor patches = Tensor::empty({B * np, cols}, x.dtype(), x.device());
  Tensor y = Tensor::empty({B, np, D}, x.dtype(), x.device());
  on_device(
      x.device(), op,
      [&] {
        cpu::patchify(x, patch, patches);
        cpu::linear_forward(patches, w, b, y);
      },
      [&] {
        cuda::patchify(x, patch, patches);
        cuda::linear_forward(patches, w, b, y);
      });
  if (any_requires_grad({images, weight, bias}))
    record(std::make_shared<PatchEmbedBackward>(patches, w, x.shape(), weight.shape(), patch), {images, weight, bias},
           y);
  return y;
}

}  // namespace vitddp
