// Tensor: a handle (shared_ptr) to a TensorImpl that holds dtype, shape, strides, an element
// offset into shared Storage, and optional autograd metadata. Copying a Tensor copies the
// handle, as in PyTorch; views share Storage but have their own TensorImpl.
//
// Differentiable functions live in framework/ops; this class only has the data-level
// operations every op needs (views, copies, conversions) and the autograd accessors.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/core/dtype.h"
#include "framework/core/error.h"
#include "framework/core/shape.h"
#include "framework/core/storage.h"

namespace vitddp {

class Allocator;
class Node;
class Tensor;
struct TensorImpl;

// Fires once the gradient of a leaf tensor is final for the current backward pass.
using GradReadyHook = std::function<void(const Tensor& leaf)>;

struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;         // accumulated gradient (leaves), may be a view
  std::shared_ptr<Node> grad_fn;            // producer (non-leaves)
  int output_nr = 0;                        // which output of grad_fn this tensor is
  std::weak_ptr<Node> grad_accumulator;     // leaves: the AccumulateGrad node, made lazily
  std::vector<std::pair<int, GradReadyHook>> grad_ready_hooks;
  int next_hook_id = 0;
  std::string name;                         // parameter name, for error messages
  // The grad buffer still holds an earlier step's values, to be overwritten, not added to, by
  // the first gradient of this step (Note [Gradients in place]).
  bool grad_stale = false;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Shape strides;  // in elements
  DType dtype = DType::kF32;
  std::shared_ptr<AutogradMeta> autograd;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories (no autograd history) ----
  static Tensor empty(const Shape& shape, DType dtype = DType::kF32, Device device = Device::cpu());
  // A CPU tensor whose memory comes from `allocator` (pinned host memory, for instance).
  static Tensor empty_with(const Shape& shape, DType dtype, Allocator& allocator, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::kF32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::kF32,
                     Device device = Device::cpu());
  // Copies `values` (interpreted as `dtype`) into a new CPU tensor of `shape`.
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape,
                            DType dtype = DType::kF32);
  static Tensor from_vector_i64(const std::vector<int64_t>& values, const Shape& shape);

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t size(int64_t d) const;
  int64_t numel() const { return shape_numel(impl().shape); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  int64_t storage_offset() const { return impl().offset; }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  bool is_contiguous() const;
  std::string description() const;  // "f32[2, 3] on cpu"

  // ---- raw data ----
  void* data_ptr() const;
  template <typename T>
  T* data() const {
    check_element_type(sizeof(T), is_int_type<T>());
    return static_cast<T*>(data_ptr());
  }
  // Single value of a one-element tensor, converted to double (copies from the GPU if needed).
  double item() const;
  // All values as doubles in logical (row-major) order; for tests and I/O.
  std::vector<double> to_vector() const;

  // ---- data-level operations (not recorded by autograd) ----
  Tensor contiguous() const;                       // self if already contiguous
  Tensor clone() const;                            // always a fresh contiguous copy
  Tensor to(DType dtype) const;                    // converted copy (self if same dtype)
  Tensor to(Device device) const;                  // copy to another device (self if same)
  Tensor& copy_(const Tensor& src);                // same shape; converts dtype/device
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  Tensor detach() const;                           // shares storage, no autograd
  // Views (share storage; no autograd here: see ops/shape_ops.h for the differentiable ones).
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;
  Tensor view_as_shape(const Shape& shape) const;  // requires contiguous
  Tensor flatten_view() const { return view_as_shape({numel()}); }
  // Makes this tensor alias (storage, offset) with its current shape, as `dtype` (default: its
  // own); every handle to it sees the change. Used by ParamArena.
  void rebind_storage(std::shared_ptr<Storage> storage, int64_t offset);
  void rebind_storage(std::shared_ptr<Storage> storage, int64_t offset, DType dtype);

  // ---- autograd ----
  bool requires_grad() const { return impl().autograd && impl().autograd->requires_grad; }
  Tensor& set_requires_grad(bool value);
  bool is_leaf() const { return !impl().autograd || !impl().autograd->grad_fn; }
  Tensor grad() const;
  void set_grad(const Tensor& grad);
  const std::shared_ptr<Node>& grad_fn() const;
  int output_nr() const { return impl().autograd ? impl().autograd->output_nr : 0; }
  void set_name(const std::string& name);
  std::string name() const;  // parameter name, or "" if none
  // Registers a hook that fires when this leaf's gradient is final for a backward pass.
  int register_grad_ready_hook(GradReadyHook hook);
  void remove_grad_ready_hook(int id);
  // Runs backward from this tensor; a scalar root gets gradient 1. See autograd/engine.h.
  void backward(const Tensor& grad_output = Tensor()) const;

  TensorImpl& impl() const;
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  AutogradMeta& autograd_meta();  // creates the metadata if missing
  bool same_impl(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  template <typename T>
  static constexpr bool is_int_type() { return std::is_integral<T>::value; }
  void check_element_type(size_t size, bool integral) const;
  std::shared_ptr<TensorImpl> impl_;
};

// Throws "<op>: expected <what>, got <tensor description>" unless `cond`.
void check_tensor(bool cond, const char* op, const char* what, const Tensor& t);

}  // namespace vitddp
