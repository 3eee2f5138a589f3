#include "framework/autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"
#include "framework/core/tensor_math.h"

namespace vitddp {
namespace {

struct ByPriority {
  bool operator()(const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) const {
    return a->priority() < b->priority();
  }
};

// Number of edges into each node reachable from `root`.
std::unordered_map<Node*, int> count_dependencies(const std::shared_ptr<Node>& root) {
  std::unordered_map<Node*, int> deps;
  std::unordered_set<Node*> seen{root.get()};
  std::vector<Node*> stack{root.get()};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& e : node->next_edges) {
      if (!e.valid()) continue;
      ++deps[e.fn.get()];
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }
  return deps;
}

// Whether another edge of the node leads to the same gradient slot as edge i (one tensor passed
// as two inputs): a node summing the pending gradient into its gradient for i would then drop
// the other edge's, so it is offered none.
bool shares_slot(const std::vector<Edge>& edges, size_t i) {
  for (size_t j = 0; j < edges.size(); ++j)
    if (j != i && edges[j].valid() && edges[j].fn == edges[i].fn && edges[j].input_nr == edges[i].input_nr)
      return true;
  return false;
}

}  // namespace

void run_backward(const Tensor& root, const Tensor& grad_output) {
  VITDDP_CHECK(root.requires_grad(), "backward: the tensor does not require grad (", root.description(), ")");
  Tensor seed = grad_output;
  if (!seed.defined()) {
    VITDDP_CHECK(root.numel() == 1, "backward: a gradient must be given for non-scalar ", root.description());
    seed = Tensor::full(root.shape(), 1.0, root.dtype(), root.device());
  }
  VITDDP_CHECK(seed.shape() == root.shape(), "backward: gradient ", seed.description(), " for ",
               root.description());

  Edge root_edge = root.grad_fn() ? Edge{root.grad_fn(), root.output_nr()} : Edge{grad_accumulator(root), 0};
  std::unordered_map<Node*, int> deps = count_dependencies(root_edge.fn);
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, ByPriority> ready;
  buffers[root_edge.fn.get()].resize(root_edge.input_nr + 1);
  buffers[root_edge.fn.get()][root_edge.input_nr] = seed;
  ready.push(root_edge.fn);

  NoGradGuard no_grad;
  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(buffers[node.get()]);
    buffers.erase(node.get());
    bool any_defined = false;
    for (const Tensor& g : grads) any_defined = any_defined || g.defined();
    std::vector<Tensor> input_grads;
    if (any_defined || dynamic_cast<AccumulateGrad*>(node.get())) {
      // Note [Sums in the producing kernel]: the gradients already sent to inputs the node can
      // add into its own.
      std::vector<Tensor> pending(node->next_edges.size());
      for (size_t i = 0; i < pending.size(); ++i) {
        const Edge& edge = node->next_edges[i];
        if (!edge.valid() || !node->sums_into_input(i) || shares_slot(node->next_edges, i)) continue;
        auto it = buffers.find(edge.fn.get());
        if (it != buffers.end() && static_cast<int>(it->second.size()) > edge.input_nr)
          pending[i] = it->second[edge.input_nr];
      }
      node->begin_apply(std::move(pending));
      input_grads = node->apply(std::move(grads));
      node->end_apply();
      node->release_saved();
    }
    input_grads.resize(node->next_edges.size());
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& edge = node->next_edges[i];
      if (!edge.valid()) continue;
      std::vector<Tensor>& buffer = buffers[edge.fn.get()];
      if (static_cast<int>(buffer.size()) <= edge.input_nr) buffer.resize(edge.input_nr + 1);
      Tensor& slot = buffer[edge.input_nr];
      const Tensor& g = input_grads[i];
      if (g.defined()) slot = slot.defined() && !node->pending_summed(i) ? add_new(slot, g) : g;
      if (--deps[edge.fn.get()] == 0) ready.push(edge.fn);
    }
  }
}

}  // namespace vitddp
