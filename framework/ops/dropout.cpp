// dropout: checks, the autograd node and device dispatch. Kernel: cpu/dropout.cpp (the mask is
// drawn on the CPU from the Generator, so it is the same on every device for the same state).
#include "framework/ops/dropout.h"

#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"
#include "framework/cpu/dropout.h"
#include "framework/ops/dispatch.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/op_checks.h"

namespace vitddp {
namespace {

class DropoutBackward final : public Node {
 public:
  explicit DropoutBackward(const Tensor& mask) { save(mask); }
  std::string name() const override { return "DropoutBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override { return {mul(grads[0], saved(0))}; }
};

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  check_floating(x, "dropout");
  VITDDP_CHECK(p >= 0.0 && p < 1.0, "dropout: probability p must be in [0, 1), got ", p, " (for ",
               x.description(), ")");
  if (!training || p == 0.0) return x;
  DType mask_dtype = x.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  Tensor mask = Tensor::empty(x.shape(), mask_dtype);
  cpu::dropout_mask(mask, p, gen);
  mask = mask.to(x.dtype()).to(x.device());
  Tensor out;
  {
    NoGradGuard no_grad;  // recorded below as one node
    out = mul(x, mask);
  }
  if (any_requires_grad({x})) record(std::make_shared<DropoutBackward>(mask), {x}, out);
  return out;
}

}  // namespace vitddp
