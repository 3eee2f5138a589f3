// sum, mean, sum_to_shape: checks, autograd nodes and device dispatch. Kernels: cpu/reduce.cpp.
#include "framework/ops/reduce.h"

#include "framework/autograd/node.h"
#include "framework/cpu/reduce.h"
#include "framework/ops/dispatch.h"
#include "framework/cuda/reduce.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/op_checks.h"
#include "framework/ops/shape_ops.h"

namespace vitddp {
namespace {

// Gradient of a full reduction: the scalar gradient (times `factor`) broadcast to `shape`.
class SumAllBackward final : public Node {
 public:
  SumAllBackward(Shape shape, double factor, const char* name)
      : shape_(std::move(shape)), factor_(factor), name_(name) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    Tensor g = factor_ == 1.0 ? grads[0] : scale(grads[0], factor_);
    return {expand(g, shape_)};
  }

 private:
  Shape shape_;
  double factor_;
  const char* name_;
};

class SumToShapeBackward final : public Node {
 public:
  explicit SumToShapeBackward(Shape shape) : shape_(std::move(shape)) {}
  std::string name() const override { return "SumToShapeBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override { return {expand(grads[0], shape_)}; }

 private:
  Shape shape_;
};

Tensor reduce_all(const Tensor& x, double factor, const char* op, const char* node_name) {
  check_floating(x, op);
  Tensor out = Tensor::empty({}, x.dtype(), x.device());
  on_device(x.device(), op, [&] { cpu::sum_all(x, factor, out); },
              [&] { cuda::sum_all(x, factor, out); });
  if (any_requires_grad({x})) record(std::make_shared<SumAllBackward>(x.shape(), factor, node_name), {x}, out);
  return out;
}

}  // namespace

Tensor sum(const Tensor& x) { return reduce_all(x, 1.0, "sum", "SumBackward"); }

Tensor mean(const Tensor& x) {
  check_defined(x, "mean");
  VITDDP_CHECK(x.numel() > 0, "mean: expected a non-empty tensor, got ", x.description());
  return reduce_all(x, 1.0 / static_cast<double>(x.numel()), "mean", "MeanBackward");
}

Tensor sum_to_shape(const Tensor& x, const Shape& shape) {
  check_floating(x, "sum_to_shape");
  bool ok = shape.size() <= x.shape().size();
  const size_t lead = ok ? x.shape().size() - shape.size() : 0;
  for (size_t d = 0; ok && d < shape.size(); ++d) ok = shape[d] == x.shape()[lead + d] || shape[d] == 1;
  VITDDP_CHECK(ok, "sum_to_shape: cannot sum a tensor of shape ", shape_str(x.shape()), " to shape ",
               shape_str(shape), " (the target must broadcast to the input's shape)");
  if (shape == x.shape()) return x;
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  on_device(x.device(), "sum_to_shape", [&] { cpu::sum_to_shape(x, out); },
              [&] { cuda::sum_to_shape(x, out); });
  if (any_requires_grad({x})) record(std::make_shared<SumToShapeBackward>(x.shape()), {x}, out);
  return out;
}

}  // namespace vitddp
