// scaled_dot_product_attention: checks, the autograd node (saves q, k, v and the softmax
// probabilities) and device dispatch. Kernels: cpu/attention.cpp.
#include "framework/ops/attention.h"

#include <cmath>

#include "framework/autograd/node.h"
#include "framework/cpu/attention.h"
#include "framework/ops/dispatch.h"
#include "framework/cuda/attention.h"
#include "framework/ops/nn_checks.h"

namespace vitddp {
namespace {

using nn_checks::brief;

class AttentionBackward final : public Node {
 public:
  AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs, double scale)
      : scale_(scale) {
    save(q);
    save(k);
    save(v);
    save(probs);
  }
  std::string name() const override { return "AttentionBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& q = saved(0);
    const Tensor& k = saved(1);
    const Tensor& v = saved(2);
    Tensor dout = grads[0].to(q.dtype()).contiguous();
    Tensor dq, dk, dv;
    if (needs_input_grad(0)) dq = Tensor::empty(q.shape(), q.dtype(), q.device());
    if (needs_input_grad(1)) dk = Tensor::empty(k.shape(), k.dtype(), k.device());
    if (needs_input_grad(2)) dv = Tensor::empty(v.shape(), v.dtype(), v.device());
    on_device(q.device(), "scaled_dot_product_attention backward",
              [&] { cpu::attention_backward(q, k, v, saved(3), scale_, dout, dq, dk, dv); },
              [&] { cuda::attention_backward(q, k, v, saved(3), scale_, dout, dq, dk, dv); });
    return {dq, dk, dv};
  }

 private:
  double scale_;
};

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in) {
  const char* op = "scaled_dot_product_attention";
  nn_checks::check_floating(op, "q", q_in);
  nn_checks::check_floating(op, "k", k_in);
  nn_checks::check_floating(op, "v", v_in);
  nn_checks::check_like(op, "k", k_in, "q", q_in);
  nn_checks::check_like(op, "v", v_in, "q", q_in);
  VITDDP_CHECK(q_in.dim() == 4 && k_in.dim() == 4 && v_in.dim() == 4, op,
               ": q, k, v must be 4-D (B, H, N, head_dim), got q ", brief(q_in), ", k ", brief(k_in), ", v ",
               brief(v_in));
  const Shape &qs = q_in.shape(), &ks = k_in.shape(), &vs = v_in.shape();
  VITDDP_CHECK(ks[0] == qs[0] && ks[1] == qs[1] && ks[3] == qs[3] && vs[0] == qs[0] && vs[1] == qs[1] &&
                   vs[2] == ks[2],
               op, ": shapes do not match: q ", brief(q_in), ", k ", brief(k_in), ", v ", brief(v_in),
               " (need q (B, H, Nq, d), k (B, H, Nk, d), v (B, H, Nk, dv))");
  VITDDP_CHECK(qs[3] > 0, op, ": head_dim must be positive, got q ", brief(q_in));
  const double scale = 1.0 / std::sqrt(static_cast<double>(qs[3]));
  Tensor q = q_in.contiguous();
  Tensor k = k_in.contiguous();
  Tensor v = v_in.contiguous();
  Tensor probs = Tensor::empty({qs[0], qs[1], qs[2], ks[2]}, q.dtype(), q.device());
  Tensor out = Tensor::empty({qs[0], qs[1], qs[2], vs[3]}, q.dtype(), q.device());
  on_device(q.device(), op, [&] { cpu::attention_forward(q, k, v, scale, probs, out); },
              [&] { cuda::attention_forward(q, k, v, scale, probs, out); });
  if (any_requires_grad({q_in, k_in, v_in}))
    record(std::make_shared<AttentionBackward>(q, k, v, probs, scale), {q_in, k_in, v_in}, out);
  return out;
}

}  // namespace vitddp
