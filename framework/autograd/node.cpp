#include "framework/autograd/node.h"

#include <algorithm>
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

// Note [Gradients in place]
// A backward that can accumulate (a GEMM with beta = 1, a reduction that adds) writes a weight
// gradient straight into the leaf's arena buffer, instead of into a fresh tensor then added in:
// that saves a pass over every gradient and a transient copy. AccumulateGrad keeps its meaning
// (the buffer holds the running sum) and its hook timing: the engine still runs it after every
// producer of the leaf's gradient, on the same stream.
//
// Between steps the arena does not zero the buffer (another pass); it marks each leaf's
// gradient stale (ParamArena::mark_grads_stale). The step's first gradient of a stale leaf
// overwrites the buffer (a GEMM with beta = 0, whose epilogue can then write the bias gradient
// too; a reduction that stores) and clears the mark; later ones add. A leaf no gradient reached
// stays stale, and ParamArena::zero_stale_grads zeroes it once backward is done, before
// anything reads the gradients.
Tensor Node::grad_destination(size_t i) const {
  if (!needs_input_grad(i)) return Tensor();
  auto* acc = dynamic_cast<AccumulateGrad*>(next_edges[i].fn.get());
  if (!acc) return Tensor();
  Tensor grad = acc->leaf().grad();
  if (!grad.defined() || !grad.is_contiguous()) return Tensor();
  return grad;
}

Node::WeightGrads Node::weight_grads(const std::vector<std::pair<size_t, Shape>>& inputs, DType dtype,
                                     Device device) const {
  WeightGrads out{std::vector<Tensor>(inputs.size()), GradWrite::kAccumulate, true};
  bool any = false;
  std::vector<AutogradMeta*> leaves;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const auto& [index, shape] = inputs[k];
    if (!needs_input_grad(index)) continue;
    any = true;
    Tensor dest = grad_destination(index);
    if (!dest.defined() || dest.dtype() != dtype || dest.device() != device || dest.numel() != shape_numel(shape)) {
      out.in_place = false;
      break;
    }
    out.tensors[k] = dest.view_as_shape(shape);
    leaves.push_back(&static_cast<AccumulateGrad*>(next_edges[index].fn.get())->leaf().autograd_meta());
  }
  if (!any || !out.in_place) {
    out.mode = GradWrite::kOverwrite;
    out.in_place = false;
    for (size_t k = 0; k < inputs.size(); ++k)
      out.tensors[k] = needs_input_grad(inputs[k].first) ? Tensor::empty(inputs[k].second, dtype, device) : Tensor();
    return out;
  }
  // See Note [Gradients in place]: all stale, overwrite; otherwise the stale ones start at zero.
  const bool all_stale = std::all_of(leaves.begin(), leaves.end(), [](AutogradMeta* m) { return m->grad_stale; });
  for (size_t k = 0, l = 0; k < inputs.size(); ++k) {
    if (!out.tensors[k].defined()) continue;
    AutogradMeta* meta = leaves[l++];
    if (!all_stale && meta->grad_stale) out.tensors[k].zero_();
    meta->grad_stale = false;
  }
  out.mode = all_stale ? GradWrite::kOverwrite : GradWrite::kAccumulate;
  return out;
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grad_outputs) {
  Tensor leaf(leaf_);
  AutogradMeta& meta = leaf.autograd_meta();
  Tensor incoming = grad_outputs.empty() ? Tensor() : grad_outputs[0];
  if (incoming.defined()) {
    VITDDP_ASSERT(incoming.shape() == leaf.shape(), "gradient ", incoming.description(), " for leaf ",
                  leaf.description(), " ", meta.name);
    if (incoming.dtype() != leaf.dtype()) incoming = incoming.to(leaf.dtype());
    if (meta.grad && meta.grad_stale) {  // the step's first gradient: see Note [Gradients in place]
      Tensor(meta.grad).copy_(incoming);
      meta.grad_stale = false;
    } else if (meta.grad) {
      add_inplace(Tensor(meta.grad), incoming);
    } else {
      // Always a private copy: one gradient tensor can flow to several leaves (add's backward).
      meta.grad = incoming.clone().impl_ptr();
    }
  } else if (!meta.grad) {
    meta.grad = Tensor::zeros(leaf.shape(), leaf.dtype(), leaf.device()).impl_ptr();
  } else if (meta.grad_stale) {  // no gradient this step: zero, not last step's, before the hooks see it
    Tensor(meta.grad).fill_(0.0);
    meta.grad_stale = false;
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
