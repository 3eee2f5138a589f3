#include "train/graphed_step.h"

#include <cmath>
#include <string>
#include <ostream>
#include <vector>

#include "framework/core/error.h"
#if VITDDP_WITH_CUDA
#include "distributed/nccl/pg_nccl.h"
#include "framework/cuda/check.h"
#include "framework/cuda/graph.h"
#include "framework/cuda/stream.h"
#endif

namespace vitddp {

// Note [A step as a CUDA graph]
// Decision: replay forward, loss, backward and DDP's bucket collectives (with sharded updates,
// the bucket updates too) as one CUDA graph captured from the process's third step, because a
// ViT-L/32 step is hundreds of small launches and a host that issues them sets the pace. The
// first eager step rebuilds the buckets and tunes the products; the second runs as all later
// ones; PowerSGD waits for its first compressed step (CommHook::steady). Invariant: replays are
// bit-identical to eager steps (same kernels, plans, collectives and addresses; the loss is
// multiplied by a device scalar, 1, or NaN for an injected fault: x * 1 is x). The plain
// update runs eagerly after the replay; captured updates (sharded) read their step's constants
// from device memory, written before the replay (framework/optim/step_constants.h). A batch
// of another shape runs eagerly on every rank (NCCL needs a collective captured on all ranks or
// none); settings whose work changes from step to step turn the graph off, named at start.
std::string cuda_graph_unsupported(const TrainConfig& c, int64_t steps) {
  std::vector<std::string> why;
  if (steps <= kEagerStepsBeforeGraph)
    why.push_back("the run has " + std::to_string(steps) + " step(s): the graph is captured at the third");
  else if (c.hook == "powersgd" && steps <= c.powersgd_start_iter + 1)
    why.push_back("the run has " + std::to_string(steps) + " step(s) and --hook powersgd with --powersgd-start-iter " +
                  std::to_string(c.powersgd_start_iter) + ": the graph is captured after its first compressed step, "
                  "at step " + std::to_string(c.powersgd_start_iter + 2) + " at the earliest");
  if (c.accumulate > 1) why.push_back("--accumulate " + std::to_string(c.accumulate) + " (one micro-batch a step is captured)");
  if (c.update == "next-forward") why.push_back("update next-forward (its updates run inside the next step's forward)");
  if ((c.hook == "fp16" || c.hook == "bf16") && c.precision != "bf16")
    why.push_back("--hook " + c.hook + " on f32 buckets (its overflow record is indexed by a step count kept on the host)");
  if (c.find_unused_parameters) why.push_back("find-unused-parameters (the unused parameters may change from step to step)");
  if (c.dropout > 0) why.push_back("--dropout (each step draws its masks from a counter kept on the host)");
  if (!c.trace.empty()) why.push_back("--trace (its marks are recorded by the host in every step)");
  std::string out;
  for (const std::string& w : why) out += (out.empty() ? "" : "; ") + w;
  return out;
}

#if VITDDP_WITH_CUDA

struct GraphedStep::State {
  Tensor images, labels, loss_factor, loss;  // the graph's fixed input and output buffers
  cuda::CapturedGraph graph;
  ProcessGroupNccl* nccl = nullptr;  // the run's group when it is NCCL's: it watches the replays
};

GraphedStep::GraphedStep(int64_t capture_step, int64_t batch_size, int device, ProcessGroup* group,
                         std::function<bool()> steady)
    : capture_step_(capture_step),
      batch_size_(batch_size),
      device_(device),
      steady_(std::move(steady)),
      state_(std::make_unique<State>()) {
  state_->nccl = dynamic_cast<ProcessGroupNccl*>(group);
}

size_t GraphedStep::peak_memory_bytes() const { return cuda::graph_memory_high_bytes(device_); }
void GraphedStep::reset_peak_memory() { cuda::reset_graph_memory_high(device_); }

GraphedStep::~GraphedStep() = default;

bool GraphedStep::takes(int64_t step, const Tensor& images, const Tensor& labels) const {
  if (step < capture_step_ || !images.device().is_cuda()) return false;
  if (!state_->graph.valid())
    return images.dim() > 0 && images.shape()[0] == batch_size_ && (!steady_ || steady_());
  return images.shape() == state_->images.shape() && images.dtype() == state_->images.dtype() &&
         labels.shape() == state_->labels.shape() && labels.dtype() == state_->labels.dtype();
}

Tensor GraphedStep::run(int64_t step, const Tensor& images, const Tensor& labels, bool poison_loss,
                        const ForwardBackward& forward_backward, std::ostream& out) {
  State& s = *state_;
  const bool capturing = !s.graph.valid();
  if (capturing) {
    s.images = Tensor::empty(images.shape(), images.dtype(), images.device());
    s.labels = Tensor::empty(labels.shape(), labels.dtype(), labels.device());
    s.loss_factor = Tensor::empty({}, DType::kF32, images.device());
    s.loss = Tensor::empty({}, DType::kF32, images.device());
  }
  s.images.copy_(images);
  s.labels.copy_(labels);
  s.loss_factor.fill_(poison_loss ? std::nan("") : 1.0);
  if (capturing) {
    // Once, before the capture: the earlier steps' collectives finish and their tensors are
    // released now, not held by the capture for the graph's lifetime (Note [Allocations under
    // capture]).
    if (s.nccl) {
      s.nccl->align_host_copy_rings();  // the capture starts from aligned rings
      s.nccl->finish_enqueue();
      CUDA_CHECK(cudaDeviceSynchronize());
      s.nccl->check_health();
    }
    try {
      s.graph = cuda::CapturedGraph::capture([&] {
        const Tensor loss = forward_backward(s.images, s.labels, s.loss_factor);
        s.loss.copy_(loss);
        if (s.nccl) s.nccl->align_host_copy_rings();  // ... and ends with them (inside the graph)
      });
    } catch (const Error& e) {
      // The capture's own failures say so; others (a peer's failure, a timeout) keep their kind.
      const bool of_capture = e.kind() == ErrorKind::kInternal;
      throw Error(std::string("--cuda-graph: step ") + std::to_string(step + 1) + ": " + e.what() +
                      (of_capture ? "; run without --cuda-graph" : ""),
                  e.kind());
    }
    out << "cuda graph: step " << step + 1 << " captured (" << s.graph.node_count() << " nodes, "
        << s.graph.prioritized_kernel_count()
        << " kernels at their stream's higher priority); it and every later step of the same shapes replay it\n"
        << std::flush;
  } else {
    ++replays_;
  }
  // Eager all-reduces since the last replay (a loss, a flag) moved the rings: back first.
  if (s.nccl) s.nccl->align_host_copy_rings();
  s.graph.launch(cuda::current_stream());
  if (s.nccl) s.nccl->watch_current_stream("CUDA graph of step " + std::to_string(step + 1) + " (its bucket collectives)");
  return s.loss;
}

#else

struct GraphedStep::State {};

GraphedStep::GraphedStep(int64_t, int64_t, int, ProcessGroup*, std::function<bool()>) {
  throw Error("--cuda-graph needs a CUDA build");
}
size_t GraphedStep::peak_memory_bytes() const { return 0; }
void GraphedStep::reset_peak_memory() {}
GraphedStep::~GraphedStep() = default;
bool GraphedStep::takes(int64_t, const Tensor&, const Tensor&) const { return false; }
Tensor GraphedStep::run(int64_t, const Tensor&, const Tensor&, bool, const ForwardBackward&, std::ostream&) {
  throw Error("--cuda-graph needs a CUDA build");
}

#endif

}  // namespace vitddp
