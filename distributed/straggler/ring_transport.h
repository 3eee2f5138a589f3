// The small point-to-point interface the straggler-aware ring all-reduce (bypass_ring.h) is
// written against, once, for every place it runs: Gloo's unbound buffers between CPU processes,
// SimGrid's mailboxes in the simulator, threads in memory in the tests. Operations are posted,
// then waited on with a deadline; an operation the deadline passed stays posted and may still
// complete later (a late message is still received, never lost or matched to something else).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace vitddp::straggler {

// What a message is: the bypass ring's protocol keeps each kind on its own channel, so a
// receive only ever matches its kind (Note [The bypass protocol] in bypass_ring.cpp).
enum class Channel : uint8_t { kHeader, kPayload, kLateHeader, kLatePayload, kControl, kGather };
constexpr int kChannels = 6;

class RingTransport {
 public:
  // A posted send or receive; owned by the caller until it has completed.
  class Op {
   public:
    virtual ~Op() = default;
    // For a completed receive: the rank the message came from.
    virtual int source() const = 0;
  };

  virtual ~RingTransport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Seconds on the transport's clock: wall time, or the simulation's.
  virtual double now() = 0;
  // `data` must stay untouched until the send completes.
  virtual std::unique_ptr<Op> post_send(int to, Channel channel, uint64_t tag, const void* data, size_t bytes) = 0;
  // Completes with the first message on (channel, tag) from any rank in `from`, of exactly
  // `bytes` bytes.
  virtual std::unique_ptr<Op> post_recv(const std::vector<int>& from, Channel channel, uint64_t tag, void* data,
                                        size_t bytes) = 0;
  // The index in `ops` of one that has completed, or -1 once `deadline` (in now()'s seconds)
  // passes first; the caller drops a completed op from the next call's list. Throws on a
  // transport failure, or when nothing completes within the transport's own timeout.
  virtual int wait_any(const std::vector<Op*>& ops, double deadline) = 0;
  // Called before the ring adds `elements` received values into its own: the simulator charges
  // the reduction's compute time here, and tests and benchmarks make a rank slow.
  virtual void before_reduce(size_t elements) { (void)elements; }
};

// A straggler made on purpose, for a transport's before_reduce: the delay before each reduce of
// one all-reduce, `seconds` at every one, or only at the `only`-th (from 0) when `only` >= 0.
class ReduceDelay {
 public:
  explicit ReduceDelay(double seconds = 0, int only = -1) : seconds_(seconds), only_(only) {}
  // The delay before the next reduce.
  double next() {
    const int k = reduces_++;
    return only_ < 0 || only_ == k ? seconds_ : 0.0;
  }

 private:
  double seconds_;
  int only_;
  int reduces_ = 0;
};

}  // namespace vitddp::straggler
