// concat, select, slice (declared in shape_ops.h). select and slice are views sharing storage;
// concat copies into a fresh tensor. Their backward scatters the gradient into zeros of the
// input's shape (select, slice) or takes views of it (concat).
#include <algorithm>

#include "framework/autograd/node.h"
#include "framework/ops/op_checks.h"
#include "framework/ops/shape_ops.h"

namespace vitddp {
namespace {

// Data-level views, no autograd. The caller has checked dim and the range.
Tensor slice_view(const Tensor& t, int64_t dim, int64_t start, int64_t end) {
  Shape shape = t.shape();
  shape[dim] = end - start;
  return t.as_strided(shape, t.strides(), t.storage_offset() + start * t.strides()[dim]);
}

Tensor select_view(const Tensor& t, int64_t dim, int64_t index) {
  Shape shape = t.shape(), strides = t.strides();
  int64_t offset = t.storage_offset() + index * strides[dim];
  shape.erase(shape.begin() + dim);
  strides.erase(strides.begin() + dim);
  return t.as_strided(shape, strides, offset);
}

// d(view of x)/dx: zeros of x's shape with the view's part set to the gradient.
class ScatterBackward final : public Node {
 public:
  ScatterBackward(const Tensor& x, int64_t dim, int64_t start, int64_t end, bool select)
      : shape_(x.shape()), dtype_(x.dtype()), device_(x.device()), dim_(dim), start_(start), end_(end),
        select_(select) {}
  std::string name() const override { return select_ ? "SelectBackward" : "SliceBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    Tensor dx = Tensor::zeros(shape_, dtype_, device_);
    Tensor part = select_ ? select_view(dx, dim_, start_) : slice_view(dx, dim_, start_, end_);
    part.copy_(grads[0]);
    return {dx};
  }

 private:
  Shape shape_;
  DType dtype_;
  Device device_;
  int64_t dim_, start_, end_;
  bool select_;
};

class ConcatBackward final : public Node {
 public:
  ConcatBackward(int64_t dim, std::vector<int64_t> sizes) : dim_(dim), sizes_(std::move(sizes)) {}
  std::string name() const override { return "ConcatBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    std::vector<Tensor> out(sizes_.size());
    int64_t start = 0;
    for (size_t i = 0; i < sizes_.size(); ++i) {
      if (needs_input_grad(i)) out[i] = slice_view(grads[0], dim_, start, start + sizes_[i]);
      start += sizes_[i];
    }
    return out;
  }

 private:
  int64_t dim_;
  std::vector<int64_t> sizes_;
};

}  // namespace

Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  VITDDP_CHECK(!xs.empty(), "concat: expected at least one tensor, got none");
  const Tensor& first = xs[0];
  check_defined(first, "concat");
  VITDDP_CHECK(first.dim() > 0, "concat: cannot concatenate zero-dimensional tensors (", first.description(), ")");
  const int64_t d = wrap_dim(dim, first.dim(), "concat");
  Shape out_shape = first.shape();
  out_shape[d] = 0;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    check_same_device_dtype(first, x, "concat");
    bool ok = x.dim() == first.dim();
    for (int64_t k = 0; ok && k < x.dim(); ++k) ok = k == d || x.shape()[k] == first.shape()[k];
    VITDDP_CHECK(ok, "concat: along dim ", dim, ", tensor ", i, " of shape ", shape_str(x.shape()),
                 " does not match tensor 0 of shape ", shape_str(first.shape()));
    sizes.push_back(x.shape()[d]);
    out_shape[d] += x.shape()[d];
  }
  Tensor out = Tensor::empty(out_shape, first.dtype(), first.device());
  int64_t start = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    slice_view(out, d, start, start + sizes[i]).copy_(xs[i]);
    start += sizes[i];
  }
  if (any_requires_grad(xs)) record(std::make_shared<ConcatBackward>(d, std::move(sizes)), xs, out);
  return out;
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  check_defined(x, "select");
  VITDDP_CHECK(x.dim() > 0, "select: cannot select from a zero-dimensional tensor (", x.description(), ")");
  const int64_t d = wrap_dim(dim, x.dim(), "select");
  const int64_t size = x.shape()[d];
  VITDDP_CHECK(index >= -size && index < size, "select: index ", index, " out of range for dim ", dim,
               " of size ", size, " in a tensor of shape ", shape_str(x.shape()));
  const int64_t i = index < 0 ? index + size : index;
  Tensor out = select_view(x, d, i);
  if (any_requires_grad({x})) record(std::make_shared<ScatterBackward>(x, d, i, i + 1, true), {x}, out);
  return out;
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end) {
  check_defined(x, "slice");
  VITDDP_CHECK(x.dim() > 0, "slice: cannot slice a zero-dimensional tensor (", x.description(), ")");
  const int64_t d = wrap_dim(dim, x.dim(), "slice");
  const int64_t size = x.shape()[d];
  // Negative bounds count from the end; end is clamped to the size.
  int64_t s = start < 0 ? start + size : start;
  int64_t e = std::min(end < 0 ? end + size : end, size);
  VITDDP_CHECK(s >= 0 && s <= size && e >= s, "slice: range [", start, ", ", end, ") is invalid for dim ", dim,
               " of size ", size, " in a tensor of shape ", shape_str(x.shape()));
  Tensor out = slice_view(x, d, s, e);
  if (any_requires_grad({x})) record(std::make_shared<ScatterBackward>(x, d, s, e, false), {x}, out);
  return out;
}

}  // namespace vitddp
