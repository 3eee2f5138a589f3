// ProcessGroup: the collectives DDP needs, over one group of ranks, with two backends: NCCL
// for CUDA tensors (on its own communication stream) and Gloo for CPU tensors (so the whole DDP
// path runs in CI across real processes over loopback). Collectives are asynchronous and
// return a Work handle; every rank must issue the same collectives in the same order.
//
// Failures: bad arguments throw ErrorKind::kUser from the call itself. A peer that exited or
// lost its connection surfaces as ErrorKind::kPeer, a collective that made no progress within
// ProcessGroupOptions::timeout as ErrorKind::kTimeout, from Work::wait() (and Work::done() for
// NCCL, whose wait does not block). After either the group is unusable: every later call throws
// the same kind, and the caller should tear down and exit.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "framework/core/tensor.h"

namespace vitddp {

// kMin: integer tensors too (a consensus over ranks, as the sharded update's non-finite report).
enum class ReduceOp { kSum, kAvg, kMin };
const char* reduce_op_name(ReduceOp op);

class Work {
 public:
  virtual ~Work() = default;
  // Waits for the collective. NCCL: makes the caller's current stream wait for the
  // communication stream (the host does not block); Gloo: blocks until the result is in place.
  // Throws (ErrorKind::kPeer / kTimeout) when the collective failed or exceeded the timeout.
  virtual void wait() = 0;
  // True once the result is in place (never blocks).
  virtual bool done() = 0;
  // wait(), then blocks the host until done(), polling it: a failed or timed-out collective
  // throws (from wait(), or from an NCCL done()) instead of hanging.
  void wait_on_host();
};

struct ProcessGroupOptions {
  int rank = 0;
  int world_size = 1;
  std::string rendezvous;  // a folder all ranks share (file store); fresh for each run
  // Bounds the rendezvous and every collective (Gloo: each send/receive; NCCL: from launch to
  // completion on the communication stream).
  std::chrono::milliseconds timeout{300000};
  // NCCL, more than one rank on one host: all-reduces of f32/bf16/f16 go through pinned shared
  // host memory and the copy engines instead of NCCL (distributed/nccl/host_copy_transport.h;
  // transport host-copy). Other collectives stay NCCL's. Capturable in a CUDA graph
  // (ProcessGroupNccl::align_host_copy_rings, Note [Replaying host copies]).
  bool host_copy_allreduce = false;
  // With host_copy_allreduce: back-to-back all-reduces on apart buffers overlap their copies
  // (Note [Back-to-back host copies]); false: each starts after the last one ended. Off until
  // measured on two GPUs.
  bool host_copy_overlap = false;
  // With host_copy_allreduce: the owner's additions on a stream of their own beside the receiving
  // copies (Note [Reductions beside the copies]); false: on the receiving stream. Off until
  // measured on two GPUs.
  bool host_copy_reduce_beside = false;
  // Gloo, f32 sums and averages: Gloo's own ring all-reduce, or the straggler-aware ring of
  // distributed/straggler/bypass_ring.h with its bypass (kBypassRing: a rank that waited
  // bypass_wait for its predecessor moves on) or without (kRing).
  // In the order of the expert key's names (cpu_allreduce_names() in train/config.h).
  enum class CpuAllreduce { kGloo, kRing, kBypassRing };
  CpuAllreduce cpu_allreduce = CpuAllreduce::kGloo;
  std::chrono::duration<double> bypass_wait{0.002};
  // With kRing or kBypassRing: this rank sleeps this long before each reduce, or only before
  // the ring_late_reduce-th of each all-reduce when that is >= 0 (a straggler made on purpose,
  // for tests and benchmarks).
  std::chrono::duration<double> ring_reduce_delay{0.0};
  int ring_late_reduce = -1;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend() const = 0;

  // In place on a contiguous tensor of the group's device kind.
  virtual std::shared_ptr<Work> allreduce(const Tensor& tensor, ReduceOp op) = 0;
  virtual std::shared_ptr<Work> broadcast(const Tensor& tensor, int root) = 0;
  // out: (world, *in.shape()), contiguous; out[r] = rank r's `in`. In place when `in` is out[rank].
  virtual std::shared_ptr<Work> allgather(const Tensor& in, const Tensor& out) = 0;
  // out: contiguous, in.numel() / world elements; out = this rank's part of the reduction of
  // every rank's `in` (elements [rank * n, (rank + 1) * n) of it). In place when `out` is that
  // part of `in`; `in` is otherwise left as it was.
  virtual std::shared_ptr<Work> reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) = 0;
  virtual void barrier() = 0;

  // Host time the calling threads spent issuing collectives so far (`train --op-breakdown`
  // reports one step's): how many, and the seconds from the call to its return. Zero where a
  // backend does not count.
  struct IssueStats {
    int64_t collectives = 0;
    double seconds = 0.0;
  };
  virtual IssueStats issue_stats() const { return {}; }

  // Throws the group's failure, or one it detects now, without issuing anything (NCCL: an
  // asynchronous error, a late collective, a peer's failed host-copy transport); nothing where a
  // backend has nothing to check. The trainer calls it before writing weights, once the step's
  // work is done, so a failure seen by then is never saved as a result.
  virtual void check_health() {}

 protected:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}

 private:
  int rank_;
  int size_;
};

// Gloo over TCP on loopback (or the host's interface), rendezvous through the file store.
// Throws when this build has no Gloo.
std::unique_ptr<ProcessGroup> make_gloo_process_group(const ProcessGroupOptions& options);
// NCCL on the current CUDA device; the unique id travels through the file store.
// Throws when this build has no NCCL.
std::unique_ptr<ProcessGroup> make_nccl_process_group(const ProcessGroupOptions& options);
// Whether this build has each backend (tests skip themselves, the CLI names the missing one).
bool has_gloo_backend();
bool has_nccl_backend();

}  // namespace vitddp
