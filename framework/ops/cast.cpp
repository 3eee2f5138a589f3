#include "framework/ops/cast.h"

#include "framework/autograd/node.h"

namespace vitddp {
namespace {

class CastBackward final : public Node {
 public:
  explicit CastBackward(DType input_dtype) : input_dtype_(input_dtype) {}
  std::string name() const override { return "CastBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override { return {grads[0].to(input_dtype_)}; }

 private:
  DType input_dtype_;
};

}  // namespace

Tensor cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  VITDDP_CHECK(is_floating(dtype) == is_floating(x.dtype()) || !x.requires_grad(), "cast: cannot differentiate ",
               x.description(), " to ", dtype_name(dtype));
  Tensor y = x.to(dtype);
  if (any_requires_grad({x})) record(std::make_shared<CastBackward>(x.dtype()), {x}, y);
  return y;
}

}  // namespace vitddp
