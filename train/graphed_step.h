// --cuda-graph: a training step's forward, backward and DDP bucket collectives captured once as a
// CUDA graph and replayed. See Note [A step as a CUDA graph] in graphed_step.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>

#include "framework/core/tensor.h"
#include "train/config.h"

namespace vitddp {

class ProcessGroup;

// The eager steps before the capture: the first rebuilds DDP's buckets and tunes the products,
// the second runs as every later step will.
constexpr int64_t kEagerStepsBeforeGraph = 2;

// Why this run cannot replay its steps as a graph, in a phrase ("" when it can). `steps`: the
// steps this process will run.
std::string cuda_graph_unsupported(const TrainConfig& config, int64_t steps);

// The captured step and its fixed inputs and output (GPU builds; elsewhere construction throws).
class GraphedStep {
 public:
  // Captures at the first step from `capture_step` on whose batch holds `batch_size` images (the
  // same step on every rank: the sampler gives each as many); `group`: the run's process group
  // (null without DDP), whose watchdog then holds each replay to its timeout.
  // `steady`: whether the step may be captured now (DDP's hook has no first-step set-up left,
  // CommHook::steady), asked from `capture_step` on until the capture; the same on every rank.
  GraphedStep(int64_t capture_step, int64_t batch_size, int device, ProcessGroup* group,
              std::function<bool()> steady = {});
  ~GraphedStep();
  GraphedStep(const GraphedStep&) = delete;
  GraphedStep& operator=(const GraphedStep&) = delete;

  // Whether step `step` with these inputs runs from the graph: from the capture step on, with
  // inputs of the captured shapes (a short last batch runs eagerly). Depends only on what every
  // rank has alike, so that all ranks replay the same steps (NCCL needs a collective captured on
  // every rank or on none).
  bool takes(int64_t step, const Tensor& images, const Tensor& labels) const;
  // The step's forward and backward (DDP's reduction included) from `images` and `labels`,
  // returning its loss times `loss_factor` (an f32 scalar on the device). Captured at the first
  // call, which also runs it; replayed at the next.
  using ForwardBackward =
      std::function<Tensor(const Tensor& images, const Tensor& labels, const Tensor& loss_factor)>;
  // Copies the inputs into the graph's own, sets the loss factor (1, or NaN for a fault injected
  // into this rank's loss) and runs the graph; returns the loss, in a fixed buffer that the next
  // run overwrites (in stream order).
  Tensor run(int64_t step, const Tensor& images, const Tensor& labels, bool poison_loss,
             const ForwardBackward& forward_backward, std::ostream& out);
  int64_t replays() const { return replays_; }
  // The graph's own device memory (its activations, which the device allocator does not see in a
  // replay): the most held at once since the last reset, added to the run's peak.
  size_t peak_memory_bytes() const;
  void reset_peak_memory();

 private:
  struct State;
  int64_t capture_step_;
  int64_t batch_size_;
  int device_;
  int64_t replays_ = 0;
  std::function<bool()> steady_;
  std::unique_ptr<State> state_;
};

}  // namespace vitddp
