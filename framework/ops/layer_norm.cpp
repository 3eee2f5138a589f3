// layer_norm and add_layer_norm: checks, the autograd node and device dispatch. Kernels:
// cpu/layer_norm.cpp, cuda/layer_norm.cu.
#include "framework/ops/layer_norm.h"

#include "framework/autograd/node.h"
#include "framework/cpu/layer_norm.h"
#include "framework/ops/dispatch.h"
#include "framework/cuda/layer_norm.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/nn_checks.h"

namespace vitddp {
namespace {

using nn_checks::brief;

class LayerNormBackward final : public Node {
 public:
  LayerNormBackward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd) {
    save(x);
    save(w);
    save(mean);
    save(rstd);
  }
  std::string name() const override { return "LayerNormBackward"; }
  // A residual stream's layer norm adds the skip's gradient into dx (Note [Sums in the
  // producing kernel]).
  bool sums_into_input(size_t i) const override { return i == 0; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& x = saved(0);
    const Tensor& w = saved(1);
    Tensor dy = grads[0].to(x.dtype()).contiguous();
    Tensor dx, dx_add;
    if (needs_input_grad(0)) {
      dx = Tensor::empty(x.shape(), x.dtype(), x.device());
      const Tensor pending = pending_grad(0);
      if (pending.defined() && pending.dtype() == x.dtype() && pending.device() == x.device() &&
          pending.shape() == x.shape() && pending.is_contiguous()) {
        dx_add = pending;
        mark_pending_summed(0);
      }
    }
    WeightGrads wg = weight_grads({{1, w.shape()}, {2, w.shape()}}, w.dtype(), w.device());
    const Tensor &dw = wg.tensors[0], &db = wg.tensors[1];
    on_device(x.device(), "layer_norm backward",
              [&] { cpu::layer_norm_backward(x, w, saved(2), saved(3), dy, dx, dw, db, wg.mode, dx_add); },
              [&] { cuda::layer_norm_backward(x, w, saved(2), saved(3), dy, dx, dw, db, wg.mode, dx_add); });
    return {dx, wg.returned(0), wg.returned(1)};
  }
};

}  // namespace

namespace {

void check_layer_norm_args(const Tensor& input, const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "layer_norm";
  nn_checks::check_floating(op, "input", input);
  nn_checks::check_defined(op, "weight", weight);
  nn_checks::check_defined(op, "bias", bias);
  nn_checks::check_like(op, "weight", weight, "input", input);
  nn_checks::check_like(op, "bias", bias, "input", input);
  VITDDP_CHECK(input.dim() >= 1 && input.shape().back() > 0,
               "layer_norm: input must have a non-empty last dim (..., D), got ", input.description());
  const int64_t D = input.shape().back();
  VITDDP_CHECK(weight.dim() == 1 && weight.size(0) == D, "layer_norm: weight ", brief(weight),
               " does not match input ", brief(input), " (normalized dim ", D, ")");
  VITDDP_CHECK(bias.dim() == 1 && bias.size(0) == D, "layer_norm: bias ", brief(bias), " does not match input ",
               brief(input), " (normalized dim ", D, ")");
  VITDDP_CHECK(eps >= 0, "layer_norm: eps must be >= 0, got ", eps);
}

// Statistics stay in f32 for 16-bit inputs (f64 for f64): bf16 would cost backward accuracy.
DType stats_dtype(DType x) { return x == DType::kF64 ? DType::kF64 : DType::kF32; }

}  // namespace

Tensor layer_norm(const Tensor& input, const Tensor& weight, const Tensor& bias, double eps) {
  check_layer_norm_args(input, weight, bias, eps);
  Tensor x = input.contiguous();
  Tensor w = weight.contiguous();
  Tensor b = bias.contiguous();
  const int64_t rows = nn_checks::leading_rows(x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mean = Tensor::empty({rows}, stats_dtype(x.dtype()), x.device());
  Tensor rstd = Tensor::empty({rows}, stats_dtype(x.dtype()), x.device());
  on_device(x.device(), "layer_norm", [&] { cpu::layer_norm_forward(x, w, b, eps, y, mean, rstd); },
            [&] { cuda::layer_norm_forward(x, w, b, eps, y, mean, rstd); });
  if (any_requires_grad({input, weight, bias}))
    record(std::make_shared<LayerNormBackward>(x, w, mean, rstd), {input, weight, bias}, y);
  return y;
}

AddLayerNorm add_layer_norm(const Tensor& a, const Tensor& b, const Tensor& weight, const Tensor& bias, double eps) {
  auto apart = [&] {
    Tensor sum = add(a, b);
    return AddLayerNorm{sum, layer_norm(sum, weight, bias, eps)};
  };
  if (!a.defined() || !b.defined() || !a.device().is_cuda() || a.device() != b.device() || a.dtype() != b.dtype() ||
      a.shape() != b.shape() || !a.is_contiguous() || !b.is_contiguous())
    return apart();
  check_layer_norm_args(a, weight, bias, eps);
  Tensor w = weight.contiguous();
  Tensor bi = bias.contiguous();
#if VITDDP_WITH_CUDA
  if (!cuda::add_layer_norm_fits(a, b, w, bi)) return apart();  // before anything is allocated
#else
  return apart();  // no CUDA tensors in this build
#endif
  const int64_t rows = nn_checks::leading_rows(a);
  Tensor sum = Tensor::empty(a.shape(), a.dtype(), a.device());
  Tensor y = Tensor::empty(a.shape(), a.dtype(), a.device());
  Tensor mean = Tensor::empty({rows}, stats_dtype(a.dtype()), a.device());
  Tensor rstd = Tensor::empty({rows}, stats_dtype(a.dtype()), a.device());
  bool fused = false;
  on_device(a.device(), "add_layer_norm", [] {},
            [&] { fused = cuda::add_layer_norm_forward(a, b, w, bi, eps, sum, y, mean, rstd); });
  if (!fused) return apart();  // not expected after add_layer_norm_fits: the outputs are aligned
  // The graph add and layer_norm would have made: the add's node first (see Note [Sums in the
  // producing kernel]: the layer norm's backward then runs after the skip's).
  sum = recorded_as_add(a, b, sum);
  if (any_requires_grad({sum, weight, bias}))
    record(std::make_shared<LayerNormBackward>(sum, w, mean, rstd), {sum, weight, bias}, y);
  return {sum, y};
}

}  // namespace vitddp
