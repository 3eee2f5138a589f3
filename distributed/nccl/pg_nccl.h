// ProcessGroupNccl: collectives on CUDA tensors of one device over NCCL, on a dedicated
// high-priority communication stream, with a watchdog that turns a stuck or failed collective
// into an error instead of a hang.
//
// Flow of one collective (see Note [NCCL stream handshake] in the .cpp): record an event on the
// caller's current stream -> the comm stream waits for it -> the NCCL op runs on the comm stream
// -> a completion event is recorded. Work::wait() makes the caller's current stream wait for the
// completion event (the host does not block); Work::done() queries it.
//
// Failure handling (see Note [NCCL watchdog]): the communicator is non-blocking, so its
// initialisation and collectives can be aborted. A watchdog thread polls, every 100 ms, the
// in-flight collectives and ncclCommGetAsyncError. A collective whose completion event has not
// fired within ProcessGroupOptions::timeout (ErrorKind::kTimeout, naming the collective and its
// sequence number) or an asynchronous NCCL error (ErrorKind::kPeer) aborts the communicator and
// marks the group failed: from then on every call (collectives, Work::wait/done, check_health)
// throws that error. ncclCommAbort can itself hang; if it has not returned after
// kAbortGraceSeconds the process prints one line to stderr and exits with code 4. The watchdog
// itself is watched (Note [Heartbeat monitor]): if it has not completed a check for the timeout
// plus 2 * kAbortGraceSeconds (a thread stuck in a CUDA or NCCL call while holding the group),
// the process prints what it last saw and every thread's stack, and exits with code 4.
//
// The rendezvous folder carries the ncclUniqueId from rank 0 to the others: use a fresh folder
// per run, or a rank may read the id of an earlier run.
#pragma once

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/heartbeat_monitor.h"
#include "distributed/process_group.h"
#include "framework/cuda/stream.h"

namespace vitddp {

// Seconds a detached ncclCommAbort may take before the process gives up and exits with code 4.
constexpr int kAbortGraceSeconds = 10;
constexpr int kAbortHangExitCode = 4;

// Move-only owner of one NCCL communicator. The destructor finalises and destroys it (bounded by
// the timeout; warnings only, never throws); abort() hands it to a detached aborting thread.
class NcclComm {
 public:
  NcclComm() = default;
  // Non-blocking ncclCommInitRankConfig, then polls until the communicator is ready; throws
  // kTimeout after `timeout` (aborting the half-made communicator) or kPeer on an NCCL error.
  static NcclComm init(int size, int rank, const ncclUniqueId& id, int device, std::chrono::milliseconds timeout);
  ~NcclComm();
  NcclComm(NcclComm&& o) noexcept;
  NcclComm& operator=(NcclComm&& o) noexcept;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  // Starts ncclCommAbort on a detached thread and returns at once; get() is null afterwards.
  // If the abort has not returned after kAbortGraceSeconds, the process prints one line to
  // stderr and exits with kAbortHangExitCode. The destructor waits for a pending abort.
  void abort(const std::string& reason);

  struct AbortState;

 private:
  void finalize_and_destroy() noexcept;
  void wait_for_abort() noexcept;
  ncclComm_t comm_ = nullptr;
  int device_ = 0;
  std::chrono::milliseconds timeout_{0};
  std::shared_ptr<AbortState> abort_;  // set once abort() has started
};

class ProcessGroupNccl final : public ProcessGroup {
 public:
  // On the calling thread's current CUDA device. Rank 0 makes the ncclUniqueId and writes it to
  // the FileStore in options.rendezvous; the others read it (waiting up to options.timeout).
  explicit ProcessGroupNccl(const ProcessGroupOptions& options);
  // Stops the watchdog, then finalises the communicator (warnings only, never throws).
  ~ProcessGroupNccl() override;
  ProcessGroupNccl(const ProcessGroupNccl&) = delete;
  ProcessGroupNccl& operator=(const ProcessGroupNccl&) = delete;

  std::string backend() const override;
  std::shared_ptr<Work> allreduce(const Tensor& tensor, ReduceOp op) override;
  std::shared_ptr<Work> broadcast(const Tensor& tensor, int root) override;
  std::shared_ptr<Work> allgather(const Tensor& in, const Tensor& out) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override;
  // Blocks the host until every rank has reached it (a one-element all-reduce), polling the
  // group's health meanwhile, so it fails within the timeout instead of hanging.
  void barrier() override;
  // Counted in launch(): the stream handshake, the NCCL call and the wait for a non-blocking
  // communicator to take it (ncclInProgress).
  IssueStats issue_stats() const override;

  // Throws the group's failure if it has one; otherwise checks the asynchronous NCCL error and
  // the in-flight collectives against `timeout`, aborting and throwing (kPeer / kTimeout) on a
  // problem. The watchdog calls it with the group's timeout every 100 ms; callers may call it
  // whenever they like (cheap: one event query per in-flight collective).
  void check_health(std::chrono::milliseconds timeout);
  void check_health() override { check_health(timeout_); }

  int device() const { return device_; }
  // Work recorded on the comm stream by others (the step tracer's marks) must come after the
  // issued collectives' kernels: call finish_enqueue() first (Note [Finishing an enqueue later]
  // in the .cpp: NCCL may still be putting the last one there).
  cudaStream_t comm_stream() const { return comm_stream_.get(); }
  void finish_enqueue();
  // `transport host-copy` under a CUDA graph (Note [Replaying host copies]): pads the transport's
  // rings back to their starting flags, on the comm stream, and makes the caller's current stream
  // wait for it. Call on every rank before a capture, as the capture's last collective, and
  // before every replay; nothing without the transport or when the rings are aligned.
  void align_host_copy_rings();
  // Holds the work enqueued so far on the caller's current stream (a replayed CUDA graph with
  // collectives inside, Note [Collectives in a CUDA graph]) to the group's timeout like a
  // collective named `what`: the watchdog aborts the communicator if it has not finished in time.
  void watch_current_stream(const std::string& what);

  struct Shared;  // state shared with the Work handles and the watchdog (defined in the .cpp)

 private:
  using NcclCall = std::function<ncclResult_t(ncclComm_t comm, cudaStream_t stream)>;
  // The stream handshake around one NCCL call; `keep` stays alive until the collective is done.
  // `via_host_copy`: the call issues host-copy work only (no NCCL call on the comm stream).
  std::shared_ptr<Work> launch(const std::string& what, std::vector<Tensor> keep, const NcclCall& call,
                               bool via_host_copy = false);
  using Clock = std::chrono::steady_clock;
  std::shared_ptr<Work> launch_captured(const std::string& what, std::vector<Tensor> keep, const NcclCall& call,
                                        uint64_t seq, Clock::time_point issue_start);
  // The call that issues host-copy work through launch(), failing the group when it throws.
  NcclCall host_copy_call(const std::string& what, std::function<void(cudaStream_t)> issue);
  void check_tensor_arg(const Tensor& t, const char* op, bool allow_int) const;
  void watchdog_loop();

  int device_ = 0;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<Shared> shared_;
  cuda::Stream comm_stream_;
  cuda::Event ready_;  // recorded on the caller's stream before each collective
  // Whether an NCCL call (or the rings' alignment, conservatively) went on the comm stream since
  // the last host-copy all-reduce: the next one must then follow the comm stream, not only its
  // inputs (Note [Back-to-back host copies]).
  bool nccl_since_host_copy_ = true;
  bool host_copy_overlap_ = false;  // ProcessGroupOptions::host_copy_overlap
  uint64_t next_seq_ = 0;
  IssueStats issued_;  // guarded by shared_->mutex
  Tensor barrier_buffer_;  // f32[1] on device_

  std::mutex watchdog_mutex_;
  std::condition_variable watchdog_wake_;
  bool watchdog_stop_ = false;  // guarded by watchdog_mutex_
  std::thread watchdog_;
  std::unique_ptr<HeartbeatMonitor> heartbeat_;  // the watchdog's beats
};

}  // namespace vitddp
