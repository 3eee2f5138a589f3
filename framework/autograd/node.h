// Node: one recorded operation of the autograd graph. apply() maps the gradients of the node's
// outputs to the gradients of its inputs; next_edges point to the nodes that produced those
// inputs (or to AccumulateGrad for leaves). An invalid edge means "that input needs no grad".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/core/tensor.h"

namespace vitddp {

class Node;

// How a kernel writes a gradient output: overwrite it, or add to what it holds.
enum class GradWrite { kOverwrite, kAccumulate };

struct Edge {
  std::shared_ptr<Node> fn;
  int input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // grad_outputs has one entry per output; returns one gradient per input (next_edges order).
  // A returned gradient may be undefined when the input needs none (see needs_input_grad).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) = 0;
  virtual std::string name() const = 0;

  bool needs_input_grad(size_t i) const { return i < next_edges.size() && next_edges[i].valid(); }
  // When input i is a leaf that already owns a contiguous gradient buffer (a ParamArena view),
  // returns that buffer: a backward may accumulate into it directly and return an undefined
  // gradient for i; AccumulateGrad then only fires the hooks. See Note [Gradients in place].
  Tensor grad_destination(size_t i) const;

  // Gradient outputs for the weight-like inputs `inputs` (index, shape the kernel writes): the
  // leaves' own buffers when every needed one has one (written in place: mode kOverwrite when
  // they are all stale, the step's first gradient, else kAccumulate), otherwise fresh tensors
  // (kOverwrite) for AccumulateGrad. Entries for inputs that need no gradient are undefined.
  struct WeightGrads {
    std::vector<Tensor> tensors;
    GradWrite mode;
    bool in_place = false;
    // What apply() returns for entry k: nothing when written in place.
    Tensor returned(size_t k) const { return in_place ? Tensor() : tensors[k]; }
  };
  WeightGrads weight_grads(const std::vector<std::pair<size_t, Shape>>& inputs, DType dtype, Device device) const;
  uint64_t sequence_nr() const { return sequence_nr_; }
  // Ready nodes run highest priority first; AccumulateGrad overrides it to run at once.
  virtual uint64_t priority() const { return sequence_nr_; }

  // Tensors kept for backward. The engine releases them after apply(), so a second backward
  // through the same graph fails clearly instead of reading freed state.
  size_t save(const Tensor& t) {
    saved_.push_back(t);
    return saved_.size() - 1;
  }
  const Tensor& saved(size_t i) const;
  void release_saved() {
    saved_.clear();
    released_ = true;
  }

  // Note [Sums in the producing kernel]
  // An input read by two ops (a residual stream: the next layer norm and the skip's add) gets
  // two gradients, and the engine adds them in a pass of its own (add_new). A node that can add
  // the first one in the kernel that writes its own says so here; the engine then hands it the
  // gradient already sent to that input (pending_grad, during apply) and, if the node calls
  // mark_pending_summed, takes the node's gradient as the sum instead of adding.
  virtual bool sums_into_input(size_t /*i*/) const { return false; }
  void begin_apply(std::vector<Tensor>&& pending) {
    pending_ = std::move(pending);
    pending_summed_.assign(pending_.size(), false);
  }
  bool pending_summed(size_t i) const { return i < pending_summed_.size() && pending_summed_[i]; }
  void end_apply() { pending_.clear(); }

  std::vector<Edge> next_edges;

 protected:
  // The gradient input i has received so far (undefined if none, or if not asked for).
  Tensor pending_grad(size_t i) const { return i < pending_.size() ? pending_[i] : Tensor(); }
  void mark_pending_summed(size_t i) { pending_summed_.at(i) = true; }

 private:
  std::vector<Tensor> pending_;
  std::vector<bool> pending_summed_;
  uint64_t sequence_nr_;
  std::vector<Tensor> saved_;
  bool released_ = false;
};

// Accumulates into a leaf's .grad and then fires the leaf's gradient-ready hooks. The engine
// runs it only once every gradient flowing into the leaf has arrived, so the hooks see the
// final gradient for this backward pass.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override;
  std::string name() const override { return "AccumulateGrad"; }
  uint64_t priority() const override { return UINT64_MAX; }
  Tensor leaf() const { return Tensor(leaf_); }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// Returns the leaf's AccumulateGrad node, creating it on first use.
std::shared_ptr<Node> grad_accumulator(const Tensor& leaf);

// True when grad mode is on and any input requires grad.
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Wires `node` to the graph of `inputs` and makes it the grad_fn of `output` (which then
// requires grad). Call only when any_requires_grad(inputs).
void record(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs, Tensor& output);

}  // namespace vitddp
