// RingTransport on Gloo's unbound buffers, for the bypass ring between CPU processes
// (ProcessGroupGloo with ProcessGroupOptions::bypass_ring). Gloo's receive waits cannot time out
// without closing every pair, so each posted receive is waited on, to completion or the group's
// timeout, by a pooled thread that then wakes the ring; the ring's own deadlines are waits on
// that wake-up. Sends wait for their completion only when the ring asks (its buffers are then
// reused). A rank can be made slow for tests and benchmarks: it sleeps before every reduce.
#pragma once

#include <gloo/context.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "distributed/straggler/ring_transport.h"

namespace vitddp {

class GlooRingTransport final : public straggler::RingTransport {
 public:
  // `tag`: the collective's, unique among the group's collectives in flight.
  // `delay`: slept before the reduces it names (a straggler on purpose).
  GlooRingTransport(std::shared_ptr<gloo::Context> context, uint32_t tag, std::chrono::milliseconds timeout,
                    straggler::ReduceDelay delay = straggler::ReduceDelay());
  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  double now() override;
  std::unique_ptr<Op> post_send(int to, straggler::Channel channel, uint64_t tag, const void* data,
                                size_t bytes) override;
  std::unique_ptr<Op> post_recv(const std::vector<int>& from, straggler::Channel channel, uint64_t tag, void* data,
                                size_t bytes) override;
  int wait_any(const std::vector<Op*>& ops, double deadline) override;
  void before_reduce(size_t elements) override;

  struct Shared;  // what the waiting threads and the ring share

 private:
  uint64_t slot(straggler::Channel channel, uint64_t tag) const;

  std::shared_ptr<gloo::Context> context_;
  const uint32_t tag_;
  const std::chrono::milliseconds timeout_;
  straggler::ReduceDelay delay_;
  const std::chrono::steady_clock::time_point start_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace vitddp
