// A CUDA graph captured from work that a function enqueues on the current stream, and replayed.
// See Note [Capturing a step] in graph.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <memory>

#include "framework/cuda/allocator.h"

namespace vitddp::cuda {

class CapturedGraph {
 public:
  // Captures what `enqueue` puts on the calling thread's current stream (and on the streams
  // that fork from it and join it again) into a graph, instantiated and uploaded, without
  // running any of it. Throws an Error naming the cause when the capture fails (an operation
  // that cannot be captured, a stream not joined, memory made in the capture and still alive);
  // nothing is left captured then.
  static CapturedGraph capture(const std::function<void()>& enqueue);
  CapturedGraph() = default;
  ~CapturedGraph();
  CapturedGraph(CapturedGraph&& o) noexcept;
  CapturedGraph& operator=(CapturedGraph&& o) noexcept;
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  bool valid() const { return exec_ != nullptr; }
  // Runs the graph once on `stream`, after the work already there.
  void launch(cudaStream_t stream) const;
  size_t node_count() const { return nodes_; }
  // Kernel nodes at a priority above the captured stream's (those captured from NCCL's comm
  // stream: Note [Stream priorities]): the graph runs each kernel at its own.
  size_t prioritized_kernel_count() const { return prioritized_kernels_; }

 private:
  void reset() noexcept;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  size_t nodes_ = 0;
  size_t prioritized_kernels_ = 0;
  // Frees the capture held back (Note [Allocations under capture]): done when the graph goes.
  std::unique_ptr<CaptureLedger> ledger_;
};

// The most device memory CUDA graphs' own allocations have held on `device` at once since the
// last reset (the step's activations under --cuda-graph: the device allocator does not see them
// in a replay), and its reset.
size_t graph_memory_high_bytes(int device);
void reset_graph_memory_high(int device);

}  // namespace vitddp::cuda
