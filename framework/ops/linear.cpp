// linear and matmul: checks, autograd nodes and device dispatch. Kernels: cpu/linear.cpp.
#include "framework/ops/linear.h"

#include "framework/autograd/node.h"
#include "framework/cpu/linear.h"
#include "framework/ops/dispatch.h"
#include "framework/cuda/linear.h"
#include "framework/ops/nn_checks.h"

namespace vitddp {
namespace {

using nn_checks::brief;

class LinearBackward final : public Node {
 public:
  LinearBackward(const Tensor& x, const Tensor& w) {
    save(x);
    save(w);
  }
  std::string name() const override { return "LinearBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& x = saved(0);
    const Tensor& w = saved(1);
    Tensor dy = grads[0].to(x.dtype()).contiguous();
    Tensor dx;
    if (needs_input_grad(0)) dx = Tensor::empty(x.shape(), x.dtype(), x.device());
    WeightGrads wg = weight_grads({{1, w.shape()}, {2, {w.size(0)}}}, w.dtype(), w.device());
    const Tensor &dw = wg.tensors[0], &db = wg.tensors[1];
    on_device(x.device(), "linear backward", [&] { cpu::linear_backward(x, w, dy, dx, dw, db, wg.mode); },
              [&] { cuda::linear_backward(x, w, dy, dx, dw, db, wg.mode); });
    return {dx, wg.returned(0), wg.returned(1)};
  }
};

class MatmulBackward final : public Node {
 public:
  MatmulBackward(const Tensor& a, const Tensor& b, int64_t batch, int64_t M, int64_t K, int64_t N, bool b_shared)
      : batch_(batch), M_(M), K_(K), N_(N), b_shared_(b_shared) {
    save(a);
    save(b);
  }
  std::string name() const override { return "MatmulBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& a = saved(0);
    const Tensor& b = saved(1);
    Tensor dc = grads[0].to(a.dtype()).contiguous();
    Tensor da, db;
    if (needs_input_grad(0)) da = Tensor::empty(a.shape(), a.dtype(), a.device());
    if (needs_input_grad(1)) db = Tensor::empty(b.shape(), b.dtype(), b.device());
    on_device(a.device(), "matmul backward",
              [&] { cpu::matmul_backward(a, b, dc, da, db, batch_, M_, K_, N_, b_shared_); },
              [&] { cuda::matmul_backward(a, b, dc, da, db, batch_, M_, K_, N_, b_shared_); });
    return {da, db};
  }

 private:
  int64_t batch_, M_, K_, N_;
  bool b_shared_;
};

}  // namespace

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  const char* op = "linear";
  nn_checks::check_floating(op, "input", input);
  nn_checks::check_defined(op, "weight", weight);
  VITDDP_CHECK(input.dim() >= 1, "linear: input must have at least 1 dim (..., in_features), got ",
               input.description());
  VITDDP_CHECK(weight.dim() == 2, "linear: weight must be 2-D (out_features, in_features), got ",
               weight.description());
  nn_checks::check_like(op, "weight", weight, "input", input);
  const int64_t out_features = weight.size(0), in_features = weight.size(1);
  VITDDP_CHECK(input.shape().back() == in_features, "linear: input ", brief(input), " does not match weight ",
               brief(weight), " (in_features ", in_features, ")");
  if (bias.defined()) {
    nn_checks::check_like(op, "bias", bias, "input", input);
    VITDDP_CHECK(bias.dim() == 1 && bias.size(0) == out_features, "linear: bias ", brief(bias),
                 " does not match weight ", brief(weight), " (out_features ", out_features, ")");
  }
  Tensor x = input.contiguous();
  Tensor w = weight.contiguous();
  Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  on_device(x.device(), op, [&] { cpu::linear_forward(x, w, b, y); },
              [&] { cuda::linear_forward(x, w, b, y); });
  if (any_requires_grad({input, weight, bias}))
    record(std::make_shared<LinearBackward>(x, w), {input, weight, bias}, y);
  return y;
}

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  const char* op = "matmul";
  nn_checks::check_floating(op, "a", a_in);
  nn_checks::check_floating(op, "b", b_in);
  nn_checks::check_like(op, "b", b_in, "a", a_in);
  VITDDP_CHECK(a_in.dim() >= 2 && b_in.dim() >= 2, "matmul: a ", brief(a_in), " and b ", brief(b_in),
               " must both have at least 2 dims");
  const int64_t M = a_in.size(-2), K = a_in.size(-1);
  const int64_t Kb = b_in.size(-2), N = b_in.size(-1);
  VITDDP_CHECK(K == Kb, "matmul: a ", brief(a_in), " and b ", brief(b_in), " do not match (a has ", K,
               " columns, b has ", Kb, " rows)");
  const bool b_shared = b_in.dim() == 2;
  Shape batch_shape(a_in.shape().begin(), a_in.shape().end() - 2);
  if (!b_shared) {
    Shape b_batch(b_in.shape().begin(), b_in.shape().end() - 2);
    VITDDP_CHECK(batch_shape == b_batch, "matmul: batch dims of a ", brief(a_in), " and b ", brief(b_in),
                 " differ (", shape_str(batch_shape), " vs ", shape_str(b_batch),
                 "); they must be equal or b must be 2-D");
  }
  const int64_t batch = shape_numel(batch_shape);
  Tensor a = a_in.contiguous();
  Tensor b = b_in.contiguous();
  Shape out_shape = batch_shape;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor c = Tensor::empty(out_shape, a.dtype(), a.device());
  on_device(a.device(), op, [&] { cpu::matmul_forward(a, b, c, batch, M, K, N, b_shared); },
              [&] { cuda::matmul_forward(a, b, c, batch, M, K, N, b_shared); });
  if (any_requires_grad({a_in, b_in}))
    record(std::make_shared<MatmulBackward>(a, b, batch, M, K, N, b_shared), {a_in, b_in}, c);
  return c;
}

}  // namespace vitddp
