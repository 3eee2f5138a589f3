#include "framework/nn/module.h"

namespace vitddp {

Tensor& Module::register_parameter(const std::string& name, Tensor value) {
  value.set_requires_grad(true);
  params_.emplace_back(name, value);
  return params_.back().second;
}

void Module::collect(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [name, t] : params_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

void Module::name_parameters() {
  for (auto& [name, t] : named_parameters()) t.set_name(name);
}

void Module::set_forward_pre_hook(const ForwardPreHook& hook) {
  pre_hook_ = hook;
  for (auto& [name, child] : children_) child->set_forward_pre_hook(hook);
}

void Module::set_training(bool training) {
  training_ = training;
  for (auto& [name, child] : children_) child->set_training(training);
}

}  // namespace vitddp
