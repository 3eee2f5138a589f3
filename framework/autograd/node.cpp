#include "framework/autograd/node.h"

#include <atomic>

#include "framework/autograd/grad_mode.h"
#include "framework/core/tensor_math.h"

namespace vitddp {
namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
}

Node::Node() : sequence_nr_(g_next_sequence_nr.fetch_add(1)) {}

const Tensor& Node::saved(size_t i) const {
  VITDDP_CHECK(!released_, name(), ": backward through a graph a second time: its saved tensors were "
               "freed after the first backward");
  VITDDP_ASSERT(i < saved_.size(), "saved tensor index out of range in ", name());
  return saved_[i];
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grad_outputs) {
  Tensor leaf(leaf_);
  AutogradMeta& meta = leaf.autograd_meta();
  Tensor incoming = grad_outputs.empty() ? Tensor() : grad_outputs[0];
  if (incoming.defined()) {
    VITDDP_ASSERT(incoming.shape() == leaf.shape(), "gradient ", incoming.description(), " for leaf ",
                  leaf.description(), " ", meta.name);
    if (incoming.dtype() != leaf.dtype()) incoming = incoming.to(leaf.dtype());
    if (meta.grad) {
      add_inplace(Tensor(meta.grad), incoming);
    } else {
      // Always a private copy: one gradient tensor can flow to several leaves (add's backward).
      meta.grad = incoming.clone().impl_ptr();
    }
  } else if (!meta.grad) {
    meta.grad = Tensor::zeros(leaf.shape(), leaf.dtype(), leaf.device()).impl_ptr();
  }
  // Copy the list: a hook may register or remove hooks.
  auto hooks = meta.grad_ready_hooks;
  for (auto& [id, hook] : hooks) hook(leaf);
  return {};
}

std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  AutogradMeta& meta = const_cast<Tensor&>(leaf).autograd_meta();
  std::shared_ptr<Node> node = meta.grad_accumulator.lock();
  if (!node) {
    node = std::make_shared<AccumulateGrad>(leaf.impl_ptr());
    meta.grad_accumulator = node;
  }
  return node;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs, Tensor& output) {
  node->next_edges.clear();
  for (const Tensor& t : inputs) {
    if (!t.defined() || !t.requires_grad()) {
      node->next_edges.push_back(Edge{});
    } else if (t.grad_fn()) {
      node->next_edges.push_back(Edge{t.grad_fn(), t.output_nr()});
    } else {
      node->next_edges.push_back(Edge{grad_accumulator(t), 0});
    }
  }
  AutogradMeta& meta = output.autograd_meta();
  meta.requires_grad = true;
  meta.grad_fn = node;
  meta.output_nr = 0;
}

}  // namespace vitddp
