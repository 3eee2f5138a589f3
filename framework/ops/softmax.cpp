// softmax (last dim): checks, the autograd node and device dispatch. Kernels: cpu/softmax.cpp.
#include "framework/ops/softmax.h"

#include "framework/autograd/node.h"
#include "framework/cpu/softmax.h"
#include "framework/ops/dispatch.h"
#include "framework/cuda/softmax.h"
#include "framework/ops/nn_checks.h"

namespace vitddp {
namespace {

class SoftmaxBackward final : public Node {
 public:
  // Saves a detached alias of the output: saving y itself would make y -> node -> y a cycle.
  explicit SoftmaxBackward(const Tensor& y) { save(y.detach()); }
  std::string name() const override { return "SoftmaxBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& y = saved(0);
    Tensor dy = grads[0].to(y.dtype()).contiguous();
    Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
    on_device(y.device(), "softmax backward", [&] { cpu::softmax_backward(y, dy, dx); },
              [&] { cuda::softmax_backward(y, dy, dx); });
    return {dx};
  }
};

}  // namespace

Tensor softmax(const Tensor& input) {
  nn_checks::check_floating("softmax", "input", input);
  VITDDP_CHECK(input.dim() >= 1, "softmax: input must have at least 1 dim, got ", input.description());
  Tensor x = input.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  on_device(x.device(), "softmax", [&] { cpu::softmax_forward(x, y); },
              [&] { cuda::softmax_forward(x, y); });
  if (any_requires_grad({input})) record(std::make_shared<SoftmaxBackward>(y), {input}, y);
  return y;
}

}  // namespace vitddp
