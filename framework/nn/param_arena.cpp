#include "framework/nn/param_arena.h"

namespace vitddp {

// Note [Arena layout]
// Parameters are laid out in *reverse* registration order: the last-registered parameter (the
// head) sits at offset 0. Gradients become ready in roughly that order and DDP buckets are
// filled in it (see Note [Bucket order] in distributed/bucketing.cpp), so each bucket is one
// contiguous slice of the gradient buffer and needs no copy in or out.
ParamArena::ParamArena(const NamedTensors& params, Device device, DType compute_dtype)
    : params_(params), device_(device), compute_dtype_(compute_dtype) {
  VITDDP_CHECK(compute_dtype == DType::kF32 || compute_dtype == DType::kBF16 || compute_dtype == DType::kF16,
               "ParamArena: compute dtype must be f32, bf16 or f16, got ", dtype_name(compute_dtype));
  offsets_.resize(params.size());
  for (size_t k = params.size(); k-- > 0;) {
    const Tensor& p = params[k].second;
    VITDDP_CHECK(p.dtype() == DType::kF32, "ParamArena: parameter ", params[k].first, " is ", p.description(),
                 "; parameters must be f32 (master weights)");
    offsets_[k] = numel_;
    // Keep each parameter 16-element (64-byte) aligned for vectorised kernels.
    numel_ += (p.numel() + 15) / 16 * 16;
  }
  flat_master_ = Tensor::zeros({numel_}, DType::kF32, device);
  flat_params_ = mixed_precision() ? Tensor::zeros({numel_}, compute_dtype, device) : flat_master_;
  flat_grads_ = Tensor::zeros({numel_}, compute_dtype, device);
  for (size_t k = 0; k < params.size(); ++k) {
    Tensor p = params[k].second;
    const Shape strides = contiguous_strides(p.shape());
    flat_master_.as_strided(p.shape(), strides, offsets_[k]).copy_(p);
    if (mixed_precision()) flat_params_.as_strided(p.shape(), strides, offsets_[k]).copy_(p);
    p.autograd_meta().grad.reset();
    p.rebind_storage(flat_params_.storage(), offsets_[k], compute_dtype);
    p.set_grad(flat_grads_.as_strided(p.shape(), strides, offsets_[k]));
  }
}

NamedTensors ParamArena::master_views() const { return views_of(flat_master_); }

NamedTensors ParamArena::views_of(const Tensor& flat) const {
  VITDDP_ASSERT(flat.dim() == 1 && flat.numel() == numel_, "views_of: ", flat.description(), " is not one value per "
                "arena element (", numel_, ")");
  NamedTensors out;
  for (size_t k = 0; k < params_.size(); ++k) {
    const Shape& shape = params_[k].second.shape();
    out.emplace_back(params_[k].first,
                     flat.as_strided(shape, contiguous_strides(shape), flat.storage_offset() + offsets_[k]));
  }
  return out;
}

Tensor ParamArena::grad_slice(int64_t begin, int64_t end) const {
  VITDDP_ASSERT(0 <= begin && begin <= end && end <= numel_, "grad_slice out of range");
  return flat_grads_.as_strided({end - begin}, {1}, begin);
}

void ParamArena::zero_grad() {
  flat_grads_.zero_();
  for (auto& [name, p] : params_) p.autograd_meta().grad_stale = false;
}

void ParamArena::mark_grads_stale() {
  for (auto& [name, p] : params_) p.autograd_meta().grad_stale = true;
}

void ParamArena::zero_stale_grads() {
  for (auto& [name, p] : params_) {
    AutogradMeta& meta = p.autograd_meta();
    if (!meta.grad_stale) continue;
    p.grad().zero_();
    meta.grad_stale = false;
  }
}

}  // namespace vitddp
