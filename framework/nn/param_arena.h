// ParamArena: every parameter and its gradient live in two flat, contiguous f32 buffers, and
// the module's parameter tensors become views into them. See Note [Arena layout].
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
  ParamArena(const NamedTensors& params, Device device);
  ParamArena(const ParamArena&) = delete;
  ParamArena& operator=(const ParamArena&) = delete;

  const NamedTensors& named_params() const { return params_; }
  size_t size() const { return params_.size(); }
  Device device() const { return device_; }
  int64_t numel() const { return numel_; }
  // Element offset of parameter i (registration index) in both flat buffers.
  int64_t offset_of(size_t i) const { return offsets_[i]; }
  Tensor flat_params() const { return flat_params_; }  // (numel) f32
  Tensor flat_grads() const { return flat_grads_; }    // (numel) f32
  // A 1-D view of the gradient buffer [begin, end) in elements.
  Tensor grad_slice(int64_t begin, int64_t end) const;
  void zero_grad();

 private:
  NamedTensors params_;
  Device device_;
  std::vector<int64_t> offsets_;
  int64_t numel_ = 0;
  Tensor flat_params_;
  Tensor flat_grads_;
};

}  // namespace vitddp
