#include "framework/core/tensor.h"

#include <cstring>
#include <sstream>

#include "framework/autograd/engine.h"
#include "framework/autograd/node.h"
#include "framework/core/scalar_types.h"
#include "framework/core/strided.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/copy.h"
#endif

namespace vitddp {

// ---------------------------------------------------------------- factories

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::allocate(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::empty_with(const Shape& shape, DType dtype, Allocator& allocator, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::allocate(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), device, &allocator);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  return empty(shape, dtype, device).fill_(0.0);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  return empty(shape, dtype, device).fill_(value);
}

Tensor Tensor::from_vector(const std::vector<double>& values, const Shape& shape, DType dtype) {
  VITDDP_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector: ", values.size(),
               " values for shape ", shape_str(shape));
  Tensor t = empty(shape, dtype);
  dispatch_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* out = t.data<T>();
    for (size_t i = 0; i < values.size(); ++i) out[i] = static_cast<T>(values[i]);
  });
  return t;
}

Tensor Tensor::from_vector_i64(const std::vector<int64_t>& values, const Shape& shape) {
  VITDDP_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector_i64: ", values.size(),
               " values for shape ", shape_str(shape));
  Tensor t = empty(shape, DType::kI64);
  if (!values.empty()) std::memcpy(t.data_ptr(), values.data(), values.size() * sizeof(int64_t));
  return t;
}

// ---------------------------------------------------------------- metadata

TensorImpl& Tensor::impl() const {
  VITDDP_ASSERT(impl_ != nullptr, "use of an undefined tensor");
  return *impl_;
}

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "size")]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (shape()[d] == 1) continue;
    if (strides()[d] != expected) return false;
    expected *= shape()[d];
  }
  return true;
}

std::string Tensor::description() const {
  if (!defined()) return "undefined tensor";
  std::ostringstream os;
  os << dtype_name(dtype()) << shape_str(shape()) << " on " << device().str();
  return os.str();
}

void* Tensor::data_ptr() const {
  char* base = static_cast<char*>(impl().storage->data());
  return base ? base + impl().offset * static_cast<int64_t>(dtype_size(dtype())) : nullptr;
}

void Tensor::check_element_type(size_t size, bool integral) const {
  bool ok = dtype_size(dtype()) == size && (integral == (dtype() == DType::kI64));
  VITDDP_ASSERT(ok, "data<T>() with a ", size, "-byte ", (integral ? "integer" : "float"), " type on ",
                description());
}

std::vector<double> Tensor::to_vector() const {
  Tensor host = to(Device::cpu()).contiguous();
  std::vector<double> out(static_cast<size_t>(host.numel()));
  dispatch_dtype(host.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* in = host.data<T>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(in[i]);
  });
  return out;
}

double Tensor::item() const {
  VITDDP_CHECK(numel() == 1, "item() needs a one-element tensor, got ", description());
  return to_vector()[0];
}

void check_tensor(bool cond, const char* op, const char* what, const Tensor& t) {
  if (!cond) throw Error(std::string(op) + ": expected " + what + ", got " + t.description());
}

// ---------------------------------------------------------------- copies

namespace {

void cpu_copy(const Tensor& dst, const Tensor& src) {
  dispatch_dtype(dst.dtype(), [&](auto dst_zero) {
    using D = decltype(dst_zero);
    dispatch_dtype(src.dtype(), [&](auto src_zero) {
      using S = decltype(src_zero);
      D* out = static_cast<D*>(dst.data_ptr());
      const S* in = static_cast<const S*>(src.data_ptr());
      if constexpr (std::is_same<D, S>::value) {
        if (dst.is_contiguous() && src.is_contiguous()) {
          std::memcpy(out, in, dst.nbytes());
          return;
        }
      }
      const std::vector<int64_t> strides[2] = {dst.strides(), src.strides()};
      strided_for_each<2>(dst.shape(), strides, [&](int64_t o, int64_t i) {
        if constexpr (std::is_same<D, S>::value) {
          out[o] = in[i];
        } else {
          out[o] = static_cast<D>(static_cast<double>(in[i]));
        }
      });
    });
  });
}

}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  VITDDP_CHECK(shape() == src.shape(), "copy_: shape ", shape_str(src.shape()), " into ", shape_str(shape()));
  if (numel() == 0) return *this;
  if (device().is_cpu() && src.device().is_cpu()) {
    cpu_copy(*this, src);
    return *this;
  }
#if VITDDP_WITH_CUDA
  if (device() == src.device()) {
    cuda::copy_tensor(*this, src);
    return *this;
  }
  // Across devices: convert on the source side, move contiguous bytes, scatter on the target.
  Tensor staged = src.to(dtype()).contiguous();
  Tensor target = is_contiguous() ? *this : Tensor::empty(shape(), dtype(), device());
  cuda::memcpy_between(target.data_ptr(), device(), staged.data_ptr(), staged.device(), staged.nbytes());
  if (!target.same_impl(*this)) copy_(target);
  return *this;
#else
  throw Error("copy between " + src.device().str() + " and " + device().str() +
              " needs the CUDA backend, which this build lacks");
#endif
}

Tensor& Tensor::fill_(double value) {
  if (numel() == 0) return *this;
  if (device().is_cpu()) {
    dispatch_dtype(dtype(), [&](auto zero) {
      using T = decltype(zero);
      T* out = static_cast<T*>(data_ptr());
      const T v = static_cast<T>(value);
      const std::vector<int64_t> strides[1] = {this->strides()};
      strided_for_each<1>(shape(), strides, [&](int64_t o) { out[o] = v; });
    });
    return *this;
  }
#if VITDDP_WITH_CUDA
  cuda::fill_tensor(*this, value);
  return *this;
#else
  throw Error("fill_ on " + device().str() + " needs the CUDA backend, which this build lacks");
#endif
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  Tensor out = empty(shape(), target, device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  Tensor out = empty(shape(), dtype(), target);
  out.copy_(*this);
  return out;
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>(*impl_ptr());
  impl->autograd.reset();
  return Tensor(std::move(impl));
}

Tensor Tensor::as_strided(const Shape& new_shape, const Shape& new_strides, int64_t offset) const {
  VITDDP_ASSERT(new_shape.size() == new_strides.size(), "as_strided rank mismatch");
  int64_t max_offset = offset;
  for (size_t d = 0; d < new_shape.size(); ++d)
    if (new_shape[d] > 0) max_offset += (new_shape[d] - 1) * new_strides[d];
  bool empty_view = shape_numel(new_shape) == 0;
  VITDDP_ASSERT(empty_view || (offset >= 0 && static_cast<size_t>(max_offset + 1) * dtype_size(dtype()) <=
                                                   storage()->nbytes()),
                "view ", shape_str(new_shape), " exceeds its storage");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage();
  impl->offset = offset;
  impl->shape = new_shape;
  impl->strides = new_strides;
  impl->dtype = dtype();
  return Tensor(std::move(impl));
}

Tensor Tensor::view_as_shape(const Shape& new_shape) const {
  VITDDP_CHECK(shape_numel(new_shape) == numel(), "view: cannot view ", description(), " as ",
               shape_str(new_shape));
  VITDDP_ASSERT(is_contiguous(), "view_as_shape on a non-contiguous tensor");
  return as_strided(new_shape, contiguous_strides(new_shape), storage_offset());
}

void Tensor::rebind_storage(std::shared_ptr<Storage> new_storage, int64_t offset) {
  rebind_storage(std::move(new_storage), offset, dtype());
}

void Tensor::rebind_storage(std::shared_ptr<Storage> new_storage, int64_t offset, DType new_dtype) {
  impl().dtype = new_dtype;
  VITDDP_ASSERT(static_cast<size_t>(offset + numel()) * dtype_size(dtype()) <= new_storage->nbytes(),
                "rebind_storage beyond the end of the new storage");
  impl().storage = std::move(new_storage);
  impl().offset = offset;
  impl().strides = contiguous_strides(shape());
}

// ---------------------------------------------------------------- autograd accessors

AutogradMeta& Tensor::autograd_meta() {
  if (!impl().autograd) impl().autograd = std::make_shared<AutogradMeta>();
  return *impl().autograd;
}

Tensor& Tensor::set_requires_grad(bool value) {
  VITDDP_CHECK(!value || is_floating(dtype()), "requires_grad needs a floating dtype, got ", description());
  VITDDP_CHECK(is_leaf(), "requires_grad can only be changed on leaf tensors");
  autograd_meta().requires_grad = value;
  return *this;
}

Tensor Tensor::grad() const {
  if (!impl().autograd || !impl().autograd->grad) return Tensor();
  return Tensor(impl().autograd->grad);
}

void Tensor::set_grad(const Tensor& grad) {
  if (grad.defined())
    VITDDP_CHECK(grad.shape() == shape() && grad.dtype() == dtype() && grad.device() == device(),
                 "set_grad: gradient ", grad.description(), " does not match ", description());
  autograd_meta().grad = grad.defined() ? grad.impl_ptr() : nullptr;
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> kNone;
  return impl().autograd ? impl().autograd->grad_fn : kNone;
}

void Tensor::set_name(const std::string& name) { autograd_meta().name = name; }

std::string Tensor::name() const { return impl().autograd ? impl().autograd->name : std::string(); }

int Tensor::register_grad_ready_hook(GradReadyHook hook) {
  VITDDP_CHECK(is_leaf() && requires_grad(), "gradient-ready hooks belong on leaves that require grad");
  AutogradMeta& meta = autograd_meta();
  int id = meta.next_hook_id++;
  meta.grad_ready_hooks.emplace_back(id, std::move(hook));
  return id;
}

void Tensor::remove_grad_ready_hook(int id) {
  if (!impl().autograd) return;
  auto& hooks = impl().autograd->grad_ready_hooks;
  for (auto it = hooks.begin(); it != hooks.end(); ++it) {
    if (it->first == id) {
      hooks.erase(it);
      return;
    }
  }
}

void Tensor::backward(const Tensor& grad_output) const { run_backward(*this, grad_output); }

}  // namespace vitddp
