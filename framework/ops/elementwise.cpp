// add, mul, scale: checks, autograd nodes and device dispatch. Kernels: cpu/elementwise.cpp.
#include "framework/ops/elementwise.h"

#include "framework/autograd/node.h"
#include "framework/cpu/elementwise.h"
#include "framework/ops/dispatch.h"
#include "framework/cuda/elementwise.h"
#include "framework/ops/op_checks.h"
#include "framework/ops/reduce.h"

namespace vitddp {
namespace {

Tensor binary(cpu::BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  check_same_device_dtype(a, b, name);
  check_tensor(is_floating(a.dtype()), name, "floating tensors", a);
  Shape out_shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(out_shape, a.dtype(), a.device());
  on_device(a.device(), name, [&] { cpu::binary_forward(op, a, b, out); },
              [&] { cuda::binary_forward(op, a, b, out); });
  return out;
}

class AddBackward final : public Node {
 public:
  AddBackward(Shape a_shape, Shape b_shape) : a_shape_(std::move(a_shape)), b_shape_(std::move(b_shape)) {}
  std::string name() const override { return "AddBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& g = grads[0];
    Tensor ga = needs_input_grad(0) ? sum_to_shape(g, a_shape_) : Tensor();
    Tensor gb = needs_input_grad(1) ? sum_to_shape(g, b_shape_) : Tensor();
    return {ga, gb};
  }

 private:
  Shape a_shape_, b_shape_;
};

class MulBackward final : public Node {
 public:
  MulBackward(const Tensor& a, const Tensor& b) {
    save(a.detach());
    save(b.detach());
  }
  std::string name() const override { return "MulBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& g = grads[0];
    const Tensor& a = saved(0);
    const Tensor& b = saved(1);
    Tensor ga = needs_input_grad(0) ? sum_to_shape(mul(g, b), a.shape()) : Tensor();
    Tensor gb = needs_input_grad(1) ? sum_to_shape(mul(g, a), b.shape()) : Tensor();
    return {ga, gb};
  }
};

class ScaleBackward final : public Node {
 public:
  explicit ScaleBackward(double factor) : factor_(factor) {}
  std::string name() const override { return "ScaleBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override { return {scale(grads[0], factor_)}; }

 private:
  double factor_;
};

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary(cpu::BinaryOp::kAdd, a, b, "add");
  if (any_requires_grad({a, b})) record(std::make_shared<AddBackward>(a.shape(), b.shape()), {a, b}, out);
  return out;
}

Tensor recorded_as_add(const Tensor& a, const Tensor& b, Tensor sum) {
  VITDDP_ASSERT(a.shape() == sum.shape() && b.shape() == sum.shape(), "recorded_as_add: shapes differ");
  if (any_requires_grad({a, b})) record(std::make_shared<AddBackward>(a.shape(), b.shape()), {a, b}, sum);
  return sum;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary(cpu::BinaryOp::kMul, a, b, "mul");
  if (any_requires_grad({a, b})) record(std::make_shared<MulBackward>(a, b), {a, b}, out);
  return out;
}

Tensor scale(const Tensor& a, double factor) {
  check_floating(a, "scale");
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  on_device(a.device(), "scale", [&] { cpu::scale_forward(a, factor, out); },
              [&] { cuda::scale_forward(a, factor, out); });
  if (any_requires_grad({a})) record(std::make_shared<ScaleBackward>(factor), {a}, out);
  return out;
}

}  // namespace vitddp
