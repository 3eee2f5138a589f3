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
  CrossEntropyBackward(const Tensor& logits, const Tensor& labels) {
    save(logits);
    save(labels);
  }
  std::string name() const override { return "CrossEntropyBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& logits = saved(0);
    Tensor dloss = grads[0].to(logits.dtype()).contiguous();
    Tensor dlogits = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
    on_device(logits.device(), "cross_entropy backward",
              [&] { cpu::cross_entropy_backward(logits, saved(1), dloss, dlogits); },
              [&] { cuda::cross_entropy_backward(logits, saved(1), dloss, dlogits); });
    return {dlogits, Tensor()};
  }
};

}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& labels_in) {
  const char* op = "cross_entropy";
  nn_checks::check_floating(op, "logits", logits_in);
  nn_checks::check_defined(op, "labels", labels_in);
  VITDDP_CHECK(labels_in.dtype() == DType::kI64, "cross_entropy: labels must be i64, got ",
               labels_in.description());
  VITDDP_CHECK(labels_in.device() == logits_in.device(), "cross_entropy: labels ", labels_in.description(),
               " are on a different device from logits ", logits_in.description());
  VITDDP_CHECK(logits_in.dim() == 2, "cross_entropy: logits must be 2-D (B, C), got ", logits_in.description());
  VITDDP_CHECK(labels_in.dim() == 1 && labels_in.size(0) == logits_in.size(0), "cross_entropy: labels ",
               brief(labels_in), " do not match logits ", brief(logits_in), " (need labels (", logits_in.size(0),
               "))");
  VITDDP_CHECK(logits_in.size(0) > 0 && logits_in.size(1) > 0, "cross_entropy: logits ", brief(logits_in),
               " must have at least one row and one class");
  Tensor logits = logits_in.contiguous();
  Tensor labels = labels_in.contiguous();
  Tensor loss = Tensor::empty(Shape{}, logits.dtype(), logits.device());
  on_device(logits.device(), op, [&] { cpu::cross_entropy_forward(logits, labels, loss); },
              [&] { cuda::cross_entropy_forward(logits, labels, loss); });
  if (any_requires_grad({logits_in, labels_in}))
    record(std::make_shared<CrossEntropyBackward>(logits, labels), {logits_in, labels_in}, loss);
  return loss;
}

}  // namespace vitddp
