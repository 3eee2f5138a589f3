// RingTransport on SimGrid's S4U: each rank is an actor on a host of its own; every rank's
// messages go through one mailbox whose permanent receiver is a second actor of the rank (so
// they flow as soon as they are sent, as TCP's do), which matches them to the posted receives by
// channel, tag and source and wakes the rank through a condition variable: a rank's wait with a
// deadline is one timed wait on that variable, whatever it waits for, and no receive is posted
// twice. Payloads may stand for more bytes than they hold: `payload_scale` multiplies the
// simulated size of every payload and the elements each reduce is charged for, so a ring of a
// thousand ranks moves real values (and its sums are checked) at any simulated size.
//
// Messages to one peer leave in order, back to back at the link's rate, through a sender actor
// per peer (an outbox), as they do on a TCP connection, a Gloo pair or an NCCL channel: each
// starts once the one before has left (its bytes over the bandwidth), its latency overlapping the
// next one's. Posting them as concurrent flows instead would let SimGrid share the link between
// them fairly, so a burst of k chunks (a straggler catching up) would all arrive at k times one
// chunk's transfer and the next rank could start on none before: the ring's pipelining lost at
// every hop, and a 1 ms delay costing the plain ring about five times that. Waiting for each
// message to arrive instead would charge a latency per message, the header's too. The pacing
// assumes the link's full rate for each peer: where a rank sends to two peers at once (the
// bypass's redirects) or two ranks into one, those flows still share links in SimGrid's model.
#pragma once

#include <simgrid/s4u.hpp>

#include <deque>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "distributed/straggler/ring_transport.h"

namespace vitddp::sim {

struct SimMessage {
  int from;
  straggler::Channel channel;
  uint64_t tag;
  std::vector<unsigned char> bytes;
};

class SimGridTransport final : public straggler::RingTransport {
 public:
  // `flop_per_element`: the compute charged per reduced element on this rank's host.
  // `link_bytes_per_second`: the rate at which the outboxes send, the host link's bandwidth.
  // `delay`: what this rank adds to its reduces as a straggler (a sleep).
  SimGridTransport(int rank, int size, double payload_scale, double flop_per_element, double link_bytes_per_second,
                   straggler::ReduceDelay delay = straggler::ReduceDelay());
  ~SimGridTransport() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  double now() override { return simgrid::s4u::Engine::get_clock(); }
  std::unique_ptr<Op> post_send(int to, straggler::Channel channel, uint64_t tag, const void* data,
                                size_t bytes) override;
  std::unique_ptr<Op> post_recv(const std::vector<int>& from, straggler::Channel channel, uint64_t tag, void* data,
                                size_t bytes) override;
  int wait_any(const std::vector<Op*>& ops, double deadline) override;
  void before_reduce(size_t elements) override;

  class RecvOp;
  class SendOp;
  struct Outbox;

 private:
  void dispatch(SimMessage* m);
  bool take(RecvOp& op, SimMessage& m);
  void receive_loop();
  std::unique_ptr<Op> post_recv_locked(const std::vector<int>& from, straggler::Channel channel, uint64_t tag,
                                       void* data, size_t bytes);

  const int rank_, size_;
  const double payload_scale_, flop_per_element_, link_bytes_per_second_;
  straggler::ReduceDelay delay_;
  simgrid::s4u::Mailbox* inbox_;
  simgrid::s4u::ActorPtr receiver_;
  simgrid::s4u::MutexPtr mutex_;
  simgrid::s4u::ConditionVariablePtr arrived_;
  std::deque<std::unique_ptr<SimMessage>> unclaimed_;
  std::vector<RecvOp*> posted_;
  std::map<int, std::shared_ptr<Outbox>> outboxes_;  // by destination, made at the first send
};

// The mailbox of `rank`'s messages.
simgrid::s4u::Mailbox* inbox_of(int rank);

}  // namespace vitddp::sim
