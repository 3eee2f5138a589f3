#include "sim/simgrid_transport.h"

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "framework/core/error.h"

namespace vitddp::sim {

namespace sg4 = simgrid::s4u;
using straggler::Channel;

simgrid::s4u::Mailbox* inbox_of(int rank) { return sg4::Mailbox::by_name("rank-" + std::to_string(rank)); }

class SimGridTransport::RecvOp final : public Op {
 public:
  RecvOp(std::vector<int> from, Channel channel, uint64_t tag, void* data, size_t bytes)
      : from(std::move(from)), channel(channel), tag(tag), data(data), bytes(bytes) {}
  int source() const override { return source_rank; }
  const std::vector<int> from;
  const Channel channel;
  const uint64_t tag;
  void* const data;
  const size_t bytes;
  bool done = false;
  int source_rank = -1;
};

class SimGridTransport::SendOp final : public Op {
 public:
  explicit SendOp(sg4::CommPtr comm) : comm(std::move(comm)) {}
  int source() const override { return -1; }
  sg4::CommPtr comm;
  bool done = false;
};

namespace {
bool is_payload(Channel c) { return c == Channel::kPayload || c == Channel::kLatePayload || c == Channel::kGather; }
}  // namespace

SimGridTransport::SimGridTransport(int rank, int size, double payload_scale, double flop_per_element,
                                   double late_seconds, int late_reduce)
    : rank_(rank), size_(size), payload_scale_(payload_scale), flop_per_element_(flop_per_element),
      late_seconds_(late_seconds), late_reduce_(late_reduce), inbox_(inbox_of(rank)) {
  inbox_->set_receiver(sg4::Actor::self());
}

SimGridTransport::~SimGridTransport() {
  if (incoming_) incoming_->cancel();
  inbox_->set_receiver(nullptr);
}

std::unique_ptr<straggler::RingTransport::Op> SimGridTransport::post_send(int to, Channel channel, uint64_t tag, const void* data,
                                                               size_t bytes) {
  auto* m = new SimMessage{rank_, channel, tag, {}};
  if (getenv("RING_SIM_TRACE")) fprintf(stderr, "%9.3f send %d->%d ch%d tag%lu\n", now() * 1e6, rank_, to, int(channel), (unsigned long)tag);
  const auto* p = static_cast<const unsigned char*>(data);
  m->bytes.assign(p, p + bytes);
  const double simulated = is_payload(channel) ? static_cast<double>(bytes) * payload_scale_ : static_cast<double>(bytes);
  // A message of no bytes still crosses the link's latency.
  return std::make_unique<SendOp>(inbox_of(to)->put_async(m, static_cast<uint64_t>(std::max(1.0, simulated))));
}

bool SimGridTransport::take(RecvOp& op, SimMessage& m) {
  if (op.done || m.channel != op.channel || m.tag != op.tag ||
      std::find(op.from.begin(), op.from.end(), m.from) == op.from.end())
    return false;
  VITDDP_CHECK(m.bytes.size() == op.bytes, "simgrid transport: rank ", rank_, " got ", m.bytes.size(), " bytes from ",
               m.from, " for a receive of ", op.bytes);
  if (op.bytes > 0) std::memcpy(op.data, m.bytes.data(), op.bytes);
  op.done = true;
  op.source_rank = m.from;
  return true;
}

std::unique_ptr<straggler::RingTransport::Op> SimGridTransport::post_recv(const std::vector<int>& from, Channel channel,
                                                               uint64_t tag, void* data, size_t bytes) {
  auto op = std::make_unique<RecvOp>(from, channel, tag, data, bytes);
  for (auto it = unclaimed_.begin(); it != unclaimed_.end(); ++it)
    if (take(*op, **it)) {
      unclaimed_.erase(it);
      return op;
    }
  posted_.push_back(op.get());
  return op;
}

void SimGridTransport::dispatch(SimMessage* raw) {
  std::unique_ptr<SimMessage> m(raw);
  if (getenv("RING_SIM_TRACE")) fprintf(stderr, "%9.3f got  %d<-%d ch%d tag%lu\n", now() * 1e6, rank_, m->from, int(m->channel), (unsigned long)m->tag);
  for (auto it = posted_.begin(); it != posted_.end(); ++it)
    if (take(**it, *m)) {
      posted_.erase(it);
      return;
    }
  unclaimed_.push_back(std::move(m));
}

int SimGridTransport::wait_any(const std::vector<Op*>& ops, double deadline) {
  for (;;) {
    // Take what has already arrived first: a poll (deadline now) must see it.
    if (!incoming_) incoming_ = inbox_->get_async<SimMessage>(&arrived_);
    while (incoming_->test()) {
      dispatch(arrived_);
      arrived_ = nullptr;
      incoming_ = inbox_->get_async<SimMessage>(&arrived_);
    }
    std::vector<sg4::CommPtr> comms;
    std::vector<int> index_of;  // comms[k] is ops[index_of[k]]'s, or the inbox's (-1)
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!ops[i]) continue;
      if (auto* r = dynamic_cast<RecvOp*>(ops[i])) {
        if (r->done) return static_cast<int>(i);
      } else {
        auto* s = static_cast<SendOp*>(ops[i]);
        if (s->done || s->comm->test()) {
          s->done = true;
          return static_cast<int>(i);
        }
        comms.push_back(s->comm);
        index_of.push_back(static_cast<int>(i));
      }
    }
    if (now() >= deadline) return -1;
    comms.push_back(incoming_);
    index_of.push_back(-1);
    const double timeout = deadline > 1e300 ? -1.0 : deadline - now();
    const ssize_t k = sg4::Comm::wait_any_for(comms, timeout);
    if (k < 0) return -1;
    if (index_of[static_cast<size_t>(k)] >= 0) {
      static_cast<SendOp*>(ops[static_cast<size_t>(index_of[static_cast<size_t>(k)])])->done = true;
      return index_of[static_cast<size_t>(k)];
    }
    incoming_ = nullptr;
    dispatch(arrived_);
    arrived_ = nullptr;
  }
}

void SimGridTransport::before_reduce(size_t elements) {
  const double flop = static_cast<double>(elements) * payload_scale_ * flop_per_element_;
  if (flop > 0) sg4::this_actor::execute(flop);
  if (late_seconds_ > 0 && (late_reduce_ < 0 || late_reduce_ == reduces_)) sg4::this_actor::sleep_for(late_seconds_);
  ++reduces_;
}

}  // namespace vitddp::sim
