// Module: named parameters and submodules in registration order, with torchvision's naming
// (own parameters first, then children, dotted paths). Modules own their children.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/core/tensor.h"

namespace vitddp {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Every parameter below this module, depth first: own parameters, then each child's.
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  // Sets each parameter's autograd name to its full dotted path (for error messages).
  void name_parameters();
  void set_training(bool training);
  bool is_training() const { return training_; }
  // This module's own parameters (not its children's), in registration order.
  const NamedTensors& own_parameters() const { return params_; }

  // Called with each module (this one and every module below it) at the start of its
  // forward, before it reads its own parameters: where a deferred optimizer update can still
  // be applied in time (distributed/update/next_forward.h). An empty function removes it.
  using ForwardPreHook = std::function<void(const Module&)>;
  void set_forward_pre_hook(const ForwardPreHook& hook);

 protected:
  // Every forward starts with this (see set_forward_pre_hook).
  void before_forward() const {
    if (pre_hook_) pre_hook_(*this);
  }
  // Registers a leaf that requires grad.
  Tensor& register_parameter(const std::string& name, Tensor value);
  template <typename M>
  M& register_module(const std::string& name, std::unique_ptr<M> module) {
    M& ref = *module;
    children_.emplace_back(name, std::move(module));
    return ref;
  }

 private:
  void collect(const std::string& prefix, NamedTensors& out) const;
  NamedTensors params_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  bool training_ = true;
  ForwardPreHook pre_hook_;
};

}  // namespace vitddp
