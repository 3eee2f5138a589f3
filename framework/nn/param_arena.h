// ParamArena: every parameter and its gradient live in flat, contiguous buffers, and the
// module's parameter tensors become views into them. See Note [Arena layout].
//
// With an f32 compute dtype there are two buffers: parameters (the master weights) and
// gradients. With bf16 (mixed precision) there are three: f32 master weights, their bf16 copy
// that the module's parameters view (so the forward reads bf16 weights without a cast), and
// bf16 gradients; the optimizer updates the master and rewrites the copy in the same pass.
//
// This is what makes the optimizer one pass over one buffer, DDP buckets plain slices, and
// gradient-as-bucket-view free: a bucket's gradients are already contiguous.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/nn/module.h"

namespace vitddp {

class ParamArena {
 public:
  // Copies each parameter's values into the arena on `device` and rebinds the parameter to its
  // slice; each parameter's .grad becomes a (zeroed) view into the gradient buffer.
  ParamArena(const NamedTensors& params, Device device, DType compute_dtype = DType::kF32);
  ParamArena(const ParamArena&) = delete;
  ParamArena& operator=(const ParamArena&) = delete;

  const NamedTensors& named_params() const { return params_; }
  size_t size() const { return params_.size(); }
  Device device() const { return device_; }
  DType compute_dtype() const { return compute_dtype_; }
  bool mixed_precision() const { return compute_dtype_ != DType::kF32; }
  int64_t numel() const { return numel_; }
  // Element offset of parameter i (registration index) in both flat buffers.
  int64_t offset_of(size_t i) const { return offsets_[i]; }
  Tensor flat_master() const { return flat_master_; }  // (numel) f32 master weights
  Tensor flat_params() const { return flat_params_; }  // (numel) compute dtype (= master in f32)
  Tensor flat_grads() const { return flat_grads_; }    // (numel) compute dtype
  // The master weights as named f32 views (what checkpoints and --save write).
  NamedTensors master_views() const;
  // Named views of any flat (numel) tensor laid out as the arena (a model EMA, optimizer state).
  NamedTensors views_of(const Tensor& flat) const;
  // A 1-D view of the gradient buffer [begin, end) in elements.
  Tensor grad_slice(int64_t begin, int64_t end) const;
  void zero_grad();
  // Between steps, instead of zero_grad: every parameter's gradient is marked stale, and the
  // step's first gradient overwrites it (Note [Gradients in place] in framework/autograd).
  void mark_grads_stale();
  // After backward: zeroes the gradients that stayed stale (parameters no gradient reached), so
  // that every gradient is this step's before the reducer or the optimizer reads it.
  void zero_stale_grads();

 private:
  NamedTensors params_;
  Device device_;
  DType compute_dtype_;
  std::vector<int64_t> offsets_;
  int64_t numel_ = 0;
  Tensor flat_master_;
  Tensor flat_params_;
  Tensor flat_grads_;
};

}  // namespace vitddp
