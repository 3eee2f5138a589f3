// cross_entropy: checks, the autograd node and device dispatch. Kernels: cpu/cross_entropy.cpp.
#include "framework/ops/cross_entropy.h"

#include "framework/autograd/node.h"
#include "framework/cpu/cross_entropy.h"
#include "framework/ops/dispatch.h"
#include "framework/cuda/cross_entropy.h"
#include "framework/ops/nn_checks.h"

namespace vitddp {
namespace {

using nn_checks::brief;

class CrossEntropyBackward final : public Node {
 public:
  CrossEntropyBackward(const Tensor& logits, const Tensor& target, double eps) : eps_(eps) {
    save(logits);
    save(target);
  }
  std::string name() const override { return "CrossEntropyBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& logits = saved(0);
    Tensor dloss = grads[0].to(logits.dtype()).contiguous();
    Tensor dlogits = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
    on_device(logits.device(), "cross_entropy backward",
              [&] { cpu::cross_entropy_backward(logits, saved(1), eps_, dloss, dlogits); },
              [&] { cuda::cross_entropy_backward(logits, saved(1), eps_, dloss, dlogits); });
    return {dlogits};
  }

 private:
  double eps_;
};

}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target_in, double label_smoothing) {
  const char* op = "cross_entropy";
  nn_checks::check_floating(op, "logits", logits_in);
  nn_checks::check_defined(op, "target", target_in);
  VITDDP_CHECK(logits_in.dim() == 2, "cross_entropy: logits must be 2-D (B, C), got ", logits_in.description());
  VITDDP_CHECK(logits_in.size(0) > 0 && logits_in.size(1) > 0, "cross_entropy: logits ", brief(logits_in),
               " must have at least one row and one class");
  VITDDP_CHECK(target_in.device() == logits_in.device(), "cross_entropy: target ", target_in.description(),
               " is on a different device from logits ", logits_in.description());
  VITDDP_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy: label smoothing must be in [0, 1], got ",
               label_smoothing);
  if (target_in.dtype() == DType::kI64) {
    VITDDP_CHECK(target_in.dim() == 1 && target_in.size(0) == logits_in.size(0), "cross_entropy: labels ",
                 brief(target_in), " do not match logits ", brief(logits_in), " (need labels (", logits_in.size(0),
                 "))");
  } else {
    VITDDP_CHECK(target_in.dtype() == logits_in.dtype(), "cross_entropy: target must be i64 labels or soft targets "
                 "in the logits' dtype, got ", target_in.description(), " for logits ", logits_in.description());
    VITDDP_CHECK(target_in.shape() == logits_in.shape(), "cross_entropy: soft targets ", brief(target_in),
                 " do not match logits ", brief(logits_in));
  }
  Tensor logits = logits_in.contiguous();
  Tensor target = target_in.contiguous();
  Tensor loss = Tensor::empty(Shape{}, logits.dtype(), logits.device());
  on_device(logits.device(), op, [&] { cpu::cross_entropy_forward(logits, target, label_smoothing, loss); },
            [&] { cuda::cross_entropy_forward(logits, target, label_smoothing, loss); });
  if (logits_in.requires_grad())
    record(std::make_shared<CrossEntropyBackward>(logits, target.detach(), label_smoothing), {logits_in}, loss);
  return loss;
}

}  // namespace vitddp
