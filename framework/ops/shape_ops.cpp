// reshape, permute, transpose, expand, contiguous: views (Tensor::as_strided, sharing storage)
// or layout copies, with their autograd nodes. concat/select/slice are in index_ops.cpp.
// Pure view ops need no kernels; copies go through Tensor::copy_, which dispatches by device.
#include <algorithm>

#include "framework/autograd/node.h"
#include "framework/ops/op_checks.h"
#include "framework/ops/reduce.h"
#include "framework/ops/shape_ops.h"

namespace vitddp {
namespace {

class ReshapeBackward final : public Node {
 public:
  explicit ReshapeBackward(Shape shape) : shape_(std::move(shape)) {}
  std::string name() const override { return "ReshapeBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override { return {reshape(grads[0], shape_)}; }

 private:
  Shape shape_;
};

class PermuteBackward final : public Node {
 public:
  explicit PermuteBackward(const std::vector<int64_t>& dims) : inverse_(dims.size()) {
    for (size_t i = 0; i < dims.size(); ++i) inverse_[dims[i]] = static_cast<int64_t>(i);
  }
  std::string name() const override { return "PermuteBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override { return {permute(grads[0], inverse_)}; }

 private:
  std::vector<int64_t> inverse_;
};

class ExpandBackward final : public Node {
 public:
  explicit ExpandBackward(Shape shape) : shape_(std::move(shape)) {}
  std::string name() const override { return "ExpandBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override { return {sum_to_shape(grads[0], shape_)}; }

 private:
  Shape shape_;
};

class ContiguousBackward final : public Node {
 public:
  std::string name() const override { return "ContiguousBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override { return {grads[0]}; }
};

}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) {
  check_defined(x, "reshape");
  Shape target = shape;
  int64_t infer = -1, known = 1;
  bool ok = true;
  for (size_t d = 0; d < target.size(); ++d) {
    if (target[d] == -1) {
      ok = ok && infer < 0;
      infer = static_cast<int64_t>(d);
    } else {
      ok = ok && target[d] >= 0;
      if (ok) known *= target[d];
    }
  }
  if (ok && infer >= 0) {
    ok = known > 0 && x.numel() % known == 0;
    if (ok) target[infer] = x.numel() / known;
  }
  ok = ok && shape_numel(target) == x.numel();
  VITDDP_CHECK(ok, "reshape: cannot reshape a tensor of shape ", shape_str(x.shape()), " (", x.numel(),
               " elements) into shape ", shape_str(shape));
  Tensor src = x.contiguous();  // a copy only when x is not contiguous
  Tensor out = src.as_strided(target, contiguous_strides(target), src.storage_offset());
  if (any_requires_grad({x})) record(std::make_shared<ReshapeBackward>(x.shape()), {x}, out);
  return out;
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  check_defined(x, "permute");
  const int64_t rank = x.dim();
  std::vector<int64_t> order(dims.size());
  bool ok = static_cast<int64_t>(dims.size()) == rank;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (size_t i = 0; ok && i < dims.size(); ++i) {
    int64_t d = dims[i] < 0 ? dims[i] + rank : dims[i];
    ok = d >= 0 && d < rank && !seen[d];
    if (ok) seen[d] = true, order[i] = d;
  }
  VITDDP_CHECK(ok, "permute: dims ", shape_str(dims), " are not a permutation of the dims of a tensor of shape ",
               shape_str(x.shape()));
  Shape new_shape(rank), new_strides(rank);
  for (int64_t i = 0; i < rank; ++i) {
    new_shape[i] = x.shape()[order[i]];
    new_strides[i] = x.strides()[order[i]];
  }
  Tensor out = x.as_strided(new_shape, new_strides, x.storage_offset());
  if (any_requires_grad({x})) record(std::make_shared<PermuteBackward>(order), {x}, out);
  return out;
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  check_defined(x, "transpose");
  const int64_t rank = x.dim();
  int64_t d0 = dim0 < 0 ? dim0 + rank : dim0, d1 = dim1 < 0 ? dim1 + rank : dim1;
  VITDDP_CHECK(d0 >= 0 && d0 < rank && d1 >= 0 && d1 < rank, "transpose: dims (", dim0, ", ", dim1,
               ") out of range for a tensor of shape ", shape_str(x.shape()));
  std::vector<int64_t> dims(rank);
  for (int64_t i = 0; i < rank; ++i) dims[i] = i;
  std::swap(dims[d0], dims[d1]);
  return permute(x, dims);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  check_defined(x, "expand");
  const size_t rank = shape.size(), in_rank = x.shape().size();
  bool ok = rank >= in_rank;
  const size_t lead = ok ? rank - in_rank : 0;
  Shape new_shape(rank), new_strides(rank, 0);
  for (size_t d = 0; ok && d < rank; ++d) {
    if (d < lead) {  // new leading dim: must be given explicitly
      ok = shape[d] >= 0;
      new_shape[d] = shape[d];
      continue;
    }
    int64_t size = x.shape()[d - lead];
    int64_t want = shape[d] == -1 ? size : shape[d];
    if (want == size) {
      new_shape[d] = size;
      new_strides[d] = x.strides()[d - lead];
    } else {
      ok = size == 1 && want >= 0;
      new_shape[d] = want;
    }
  }
  VITDDP_CHECK(ok, "expand: cannot expand a tensor of shape ", shape_str(x.shape()), " to shape ", shape_str(shape),
               " (only size-1 dims and new leading dims can grow)");
  Tensor out = x.as_strided(new_shape, new_strides, x.storage_offset());
  if (any_requires_grad({x})) record(std::make_shared<ExpandBackward>(x.shape()), {x}, out);
  return out;
}

Tensor contiguous(const Tensor& x) {
  check_defined(x, "contiguous");
  if (x.is_contiguous()) return x;
  Tensor out = x.clone();
  if (any_requires_grad({x})) record(std::make_shared<ContiguousBackward>(), {x}, out);
  return out;
}

}  // namespace vitddp
