// dropout: checks, the autograd node and device dispatch. Kernels: cpu/dropout.cpp and
// cuda/dropout.cu draw the same mask for the same Generator state.
#include "framework/ops/dropout.h"

#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"
#include "framework/cpu/dropout.h"
#include "framework/ops/dispatch.h"
#include "framework/cuda/dropout.h"
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
  Tensor mask;
  if (x.device().is_cpu()) {
    mask = Tensor::empty(x.shape(), x.dtype() == DType::kF64 ? DType::kF64 : DType::kF32);
    cpu::dropout_mask(mask, p, gen);
    mask = mask.to(x.dtype());
  } else {
#if VITDDP_WITH_CUDA
    // The same draws as the CPU kernel: element i uses (seed, counter + i).
    mask = Tensor::empty(x.shape(), x.dtype(), x.device());
    cuda::dropout_mask(mask, p, gen.seed(), gen.counter());
    gen.advance(static_cast<uint64_t>(mask.numel()));
#endif
  }
  Tensor out;
  {
    NoGradGuard no_grad;  // recorded below as one node
    out = mul(x, mask);
  }
  if (any_requires_grad({x})) record(std::make_shared<DropoutBackward>(mask), {x}, out);
  return out;
}

}  // namespace vitddp
