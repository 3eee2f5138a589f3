// gelu: checks, the autograd node and device dispatch. Kernels: cpu/gelu.cpp, cuda/gelu.cu.
#include "framework/ops/gelu.h"

#include "framework/autograd/node.h"
#include "framework/cpu/gelu.h"
#include "framework/ops/dispatch.h"
#include "framework/cuda/gelu.h"

namespace vitddp {
namespace {

class GeluBackward final : public Node {
 public:
  explicit GeluBackward(const Tensor& x) { save(x); }
  std::string name() const override { return "GeluBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& x = saved(0);
    Tensor dy = grads[0].contiguous();
    Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
    on_device(x.device(), "gelu backward", [&] { cpu::gelu_backward(x, dy, dx); },
              [&] { cuda::gelu_backward(x, dy, dx); });
    return {dx};
  }
};

}  // namespace

Tensor gelu(const Tensor& input) {
  check_tensor(is_floating(input.dtype()), "gelu", "a floating tensor", input);
  Tensor x = input.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  on_device(x.device(), "gelu", [&] { cpu::gelu_forward(x, y); },
              [&] { cuda::gelu_forward(x, y); });
  if (any_requires_grad({input})) record(std::make_shared<GeluBackward>(x), {input}, y);
  return y;
}

}  // namespace vitddp
