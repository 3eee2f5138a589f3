// ProcessGroupGloo: the CPU backend. Collectives on contiguous CPU tensors (f32, f64, bf16,
// f16; i64 for everything but kAvg) over Gloo's TCP transport, with the rendezvous through our
// FileStore. Each group owns one worker thread that runs its collectives one at a time in issue
// order, so allreduce() returns at once and backward can keep computing while a bucket is in
// flight; Work::wait() blocks until the result is in place.
//
// Host selection: env VITDDP_GLOO_IFACE (an interface name such as "eth0") if set, else
// VITDDP_GLOO_HOST (a hostname or address that resolves to one of this machine's interfaces),
// else "127.0.0.1" (one machine, loopback).
//
// Failures: the group's timeout (ProcessGroupOptions::timeout) bounds the rendezvous and every
// send/receive. A peer that exits closes its sockets, and the collectives of the others fail
// with ErrorKind::kPeer; a peer that hangs (or issues a different collective) makes them fail
// with ErrorKind::kTimeout. After a failure Gloo's connections are in an unknown state: the
// group is broken, and every later collective fails with the first error's kind at once.
// SIGPIPE is blocked in the group's own threads (Gloo's writes to a dead peer would raise it).
// A watch thread posts to a WaitBoard when a collective has run for over a second, so that a
// timeout names the ranks that had not arrived (Note [Naming the late rank]).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "distributed/process_group.h"
#include "distributed/straggler/ring_transport.h"

namespace gloo {
class Context;
}

namespace vitddp {

class WaitBoard;

class ProcessGroupGloo final : public ProcessGroup {
 public:
  // Connects to every other rank; throws ErrorKind::kTimeout when one does not show up within
  // options.timeout.
  explicit ProcessGroupGloo(const ProcessGroupOptions& options);
  // Finishes the queued collectives (each bounded by the timeout), then closes the connections.
  ~ProcessGroupGloo() override;
  ProcessGroupGloo(const ProcessGroupGloo&) = delete;
  ProcessGroupGloo& operator=(const ProcessGroupGloo&) = delete;

  std::string backend() const override { return "gloo"; }
  std::shared_ptr<Work> allreduce(const Tensor& tensor, ReduceOp op) override;
  std::shared_ptr<Work> broadcast(const Tensor& tensor, int root) override;
  std::shared_ptr<Work> allgather(const Tensor& in, const Tensor& out) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override;
  // Blocks until every rank has reached it; throws like Work::wait().
  void barrier() override;

  class GlooWork;

 private:
  // Queues `body` (which runs the Gloo call with the given tag) for the worker thread.
  std::shared_ptr<Work> enqueue(const std::string& what, std::function<void(uint32_t tag)> body);
  void worker_loop();
  void watch_loop();

  std::shared_ptr<gloo::Context> context_;  // null when the world has one rank
  std::chrono::milliseconds timeout_;
  ProcessGroupOptions::CpuAllreduce cpu_allreduce_;
  double bypass_wait_seconds_;
  straggler::ReduceDelay ring_delay_;  // a straggler on purpose (ProcessGroupOptions::ring_reduce_delay)
  std::unique_ptr<WaitBoard> board_;        // null when the world has one rank

  std::mutex mutex_;
  std::condition_variable queue_changed_;
  std::deque<std::shared_ptr<GlooWork>> queue_;  // guarded by mutex_
  bool stopping_ = false;                        // guarded by mutex_
  uint64_t next_seq_ = 0;                        // guarded by mutex_
  std::shared_ptr<GlooWork> running_;            // guarded by mutex_: the collective the worker runs
  std::chrono::steady_clock::time_point running_since_;  // guarded by mutex_
  std::condition_variable watch_wake_;
  std::thread worker_;
  std::thread watcher_;                          // only with more than one rank
};

}  // namespace vitddp
