#include "framework/cuda/graph.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "framework/core/error.h"
#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {

// Note [Capturing a step]
// Stream capture in the relaxed mode: the capturing thread may still query events recorded
// before the capture (the NCCL group checks its earlier collectives in every call; the thread-
// local mode refuses that query), and other threads (the loader's copies, the NCCL watchdog, NCCL's
// own) go on as usual. A call that would wait for the captured stream still fails the capture. The
// function runs its host code once, as an eager step would; what it enqueues is recorded, not
// run, and a replay runs the same kernels on the same addresses with the same arguments. So
// every value that changes from step to step must live in device memory the graph reads (the
// batch, copied into fixed buffers before each replay), and nothing in the captured work may
// wait for the host. Memory is kept apart by the allocator's ledger (Note [Allocations under
// capture]). When the function throws, or the capture is invalidated (a synchronising call, a
// stream left unjoined), the capture is ended and dropped, and the error says so.
CapturedGraph CapturedGraph::capture(const std::function<void()>& enqueue) {
  cudaStream_t stream = current_stream();
  CapturedGraph g;
  g.ledger_ = std::make_unique<CaptureLedger>();
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  set_capture_ledger(g.ledger_.get());
  auto abandon = [&] {
    set_capture_ledger(nullptr);
    cudaGraph_t partial = nullptr;
    if (cudaStreamEndCapture(stream, &partial) == cudaSuccess && partial) CUDA_WARN(cudaGraphDestroy(partial));
    cudaGetLastError();  // the capture's error, reported by the caller's exception
    // Nothing of the graph ever ran: the held frees are safe now. Blocks made in the capture
    // were never really allocated and are dropped with it.
    release_held_frees(*g.ledger_);
    drop_capture_blocks(*g.ledger_);
  };
  try {
    enqueue();
  } catch (const Error& e) {
    abandon();
    throw Error(std::string("while capturing a CUDA graph: ") + e.what(), e.kind());  // a peer's failure stays one
  } catch (const std::exception& e) {
    abandon();
    throw Error(std::string("while capturing a CUDA graph: ") + e.what(), ErrorKind::kInternal);
  }
  set_capture_ledger(nullptr);
  const cudaError_t ended = cudaStreamEndCapture(stream, &g.graph_);
  if (ended != cudaSuccess) {
    cudaGetLastError();
    release_held_frees(*g.ledger_);
    drop_capture_blocks(*g.ledger_);
    throw Error(std::string("capturing a CUDA graph failed: cudaStreamEndCapture: ") + cudaGetErrorString(ended) +
                    " (an operation that cannot be captured, or a stream that forked from the captured one and did "
                    "not join it again)",
                ErrorKind::kInternal);
  }
  if (!g.ledger_->made.empty()) {
    const size_t count = g.ledger_->made.size(), bytes = g.ledger_->made_bytes;
    drop_capture_blocks(*g.ledger_);
    g.reset();
    throw Error("capturing a CUDA graph failed: " + std::to_string(count) + " block(s) of device memory (" +
                    std::to_string(bytes) + " bytes) made in the capture were still alive at its end; a graph is "
                    "replayed only when all it allocates is freed inside it",
                ErrorKind::kInternal);
  }
  CUDA_CHECK(cudaGraphGetNodes(g.graph_, nullptr, &g.nodes_));
  std::vector<cudaGraphNode_t> nodes(g.nodes_);
  CUDA_CHECK(cudaGraphGetNodes(g.graph_, nodes.data(), &g.nodes_));
  int launch_priority = 0;  // the captured stream's, which replays are launched into
  CUDA_CHECK(cudaStreamGetPriority(stream, &launch_priority));
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    // The runtime has no type for some driver nodes (the stream memory operations of the
    // host-copy all-reduce answer "unknown error"): they are not kernels either.
    if (cudaGraphNodeGetType(node, &type) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    if (type != cudaGraphNodeTypeKernel) continue;
    cudaKernelNodeAttrValue value{};
    CUDA_CHECK(cudaGraphKernelNodeGetAttribute(node, cudaKernelNodeAttributePriority, &value));
    if (value.priority < launch_priority) ++g.prioritized_kernels_;  // lower numbers are higher
  }
  // Each kernel keeps its stream's priority (NCCL's on the high-priority comm stream): by default
  // a graph runs all of its nodes at the priority of the stream it is launched into.
  CUDA_CHECK(cudaGraphInstantiateWithFlags(&g.exec_, g.graph_, cudaGraphInstantiateFlagUseNodePriority));
  CUDA_CHECK(cudaGraphUpload(g.exec_, stream));
  return g;
}

void CapturedGraph::launch(cudaStream_t stream) const {
  VITDDP_CHECK(exec_ != nullptr, "CapturedGraph::launch: nothing captured");
  CUDA_CHECK(cudaGraphLaunch(exec_, stream));
}

void CapturedGraph::reset() noexcept {
  if (exec_) CUDA_WARN(cudaGraphExecDestroy(exec_));
  if (graph_) CUDA_WARN(cudaGraphDestroy(graph_));
  exec_ = nullptr;
  graph_ = nullptr;
  nodes_ = 0;
  prioritized_kernels_ = 0;
  // After the graph's last replay on the current stream: the frees are stream-ordered.
  if (ledger_) release_held_frees(*ledger_);
  ledger_.reset();
}

CapturedGraph::~CapturedGraph() { reset(); }

size_t graph_memory_high_bytes(int device) {
  uint64_t bytes = 0;
  CUDA_CHECK(cudaDeviceGetGraphMemAttribute(device, cudaGraphMemAttrUsedMemHigh, &bytes));
  return static_cast<size_t>(bytes);
}

void reset_graph_memory_high(int device) {
  uint64_t zero = 0;  // the only value it may be set to
  CUDA_CHECK(cudaDeviceSetGraphMemAttribute(device, cudaGraphMemAttrUsedMemHigh, &zero));
}

CapturedGraph::CapturedGraph(CapturedGraph&& o) noexcept { *this = std::move(o); }

CapturedGraph& CapturedGraph::operator=(CapturedGraph&& o) noexcept {
  if (this != &o) {
    reset();
    graph_ = std::exchange(o.graph_, nullptr);
    exec_ = std::exchange(o.exec_, nullptr);
    nodes_ = std::exchange(o.nodes_, 0);
    prioritized_kernels_ = std::exchange(o.prioritized_kernels_, 0);
    ledger_ = std::move(o.ledger_);
  }
  return *this;
}

}  // namespace vitddp::cuda
