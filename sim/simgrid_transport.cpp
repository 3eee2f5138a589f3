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

// Complete when posted (post_send copies the bytes).
class SimGridTransport::SendOp final : public Op {
 public:
  int source() const override { return -1; }
};

// Messages to one destination and their simulated sizes, sent in order by the outbox's actor; it
// ends once closed and empty. Shared with that actor, which may outlive the transport.
struct SimGridTransport::Outbox {
  std::deque<std::pair<SimMessage*, uint64_t>> queue;
  sg4::MutexPtr mutex = sg4::Mutex::create();
  sg4::ConditionVariablePtr ready = sg4::ConditionVariable::create();
  bool closed = false;
};

namespace {
bool is_payload(Channel c) { return c == Channel::kPayload || c == Channel::kLatePayload || c == Channel::kGather; }
}  // namespace

SimGridTransport::SimGridTransport(int rank, int size, double payload_scale, double flop_per_element,
                                   double link_bytes_per_second, straggler::ReduceDelay delay)
    : rank_(rank), size_(size), payload_scale_(payload_scale), flop_per_element_(flop_per_element),
      link_bytes_per_second_(link_bytes_per_second), delay_(delay), inbox_(inbox_of(rank)),
      mutex_(sg4::Mutex::create()), arrived_(sg4::ConditionVariable::create()) {
  VITDDP_CHECK(link_bytes_per_second > 0, "simgrid transport: the link rate must be > 0, got ", link_bytes_per_second);
  receiver_ = sg4::Actor::create("inbox-" + std::to_string(rank), sg4::this_actor::get_host(),
                                 [this] { receive_loop(); });
  inbox_->set_receiver(receiver_);
}

// A message of no channel from the rank itself ends the receiver; closed outboxes end their
// actors once they have sent what they hold.
SimGridTransport::~SimGridTransport() {
  for (auto& [to, outbox] : outboxes_) {
    std::unique_lock<sg4::Mutex> lock(*outbox->mutex);
    outbox->closed = true;
    outbox->ready->notify_all();
  }
  inbox_->put(new SimMessage{rank_, Channel::kControl, ~uint64_t{0}, {}}, 1);
  inbox_->set_receiver(nullptr);
}

void SimGridTransport::receive_loop() {
  for (;;) {
    auto* m = inbox_->get<SimMessage>();
    if (m->from == rank_ && m->tag == ~uint64_t{0}) {
      delete m;
      return;
    }
    std::unique_lock<sg4::Mutex> lock(*mutex_);
    dispatch(m);
    arrived_->notify_all();
  }
}

std::unique_ptr<straggler::RingTransport::Op> SimGridTransport::post_send(int to, Channel channel, uint64_t tag, const void* data,
                                                               size_t bytes) {
  auto* m = new SimMessage{rank_, channel, tag, {}};
  const auto* p = static_cast<const unsigned char*>(data);
  m->bytes.assign(p, p + bytes);
  const double simulated = is_payload(channel) ? static_cast<double>(bytes) * payload_scale_ : static_cast<double>(bytes);
  std::shared_ptr<Outbox>& outbox = outboxes_[to];
  if (!outbox) {
    outbox = std::make_shared<Outbox>();
    // A daemon: one still holding messages for a rank that has finished ends with the simulation.
    sg4::Actor::create("outbox-" + std::to_string(rank_) + "-" + std::to_string(to), sg4::this_actor::get_host(),
                       [box = outbox, to, rate = link_bytes_per_second_] {
                         for (;;) {
                           std::unique_lock<sg4::Mutex> lock(*box->mutex);
                           while (box->queue.empty() && !box->closed) box->ready->wait(lock);
                           if (box->queue.empty()) return;
                           auto [message, size] = box->queue.front();
                           box->queue.pop_front();
                           lock.unlock();
                           inbox_of(to)->put_init(message, size)->detach();
                           sg4::this_actor::sleep_for(static_cast<double>(size) / rate);
                         }
                       })
        ->daemonize();
  }
  // A message of no bytes still crosses the link's latency. The bytes are copied, so the
  // caller's buffer is free at once. Detached in the outbox: SimGrid need not keep the sends on
  // the actor's list of activities, which every completion walks.
  std::unique_lock<sg4::Mutex> lock(*outbox->mutex);
  outbox->queue.emplace_back(m, static_cast<uint64_t>(std::max(1.0, simulated)));
  outbox->ready->notify_all();
  return std::make_unique<SendOp>();
}

std::unique_ptr<straggler::RingTransport::Op> SimGridTransport::post_recv_locked(const std::vector<int>& from,
                                                                               Channel channel, uint64_t tag,
                                                                               void* data, size_t bytes) {
  auto op = std::make_unique<RecvOp>(from, channel, tag, data, bytes);
  for (auto it = unclaimed_.begin(); it != unclaimed_.end(); ++it)
    if (take(*op, **it)) {
      unclaimed_.erase(it);
      return op;
    }
  posted_.push_back(op.get());
  return op;
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
  std::unique_lock<sg4::Mutex> lock(*mutex_);
  return post_recv_locked(from, channel, tag, data, bytes);
}

void SimGridTransport::dispatch(SimMessage* raw) {
  std::unique_ptr<SimMessage> m(raw);
  for (auto it = posted_.begin(); it != posted_.end(); ++it)
    if (take(**it, *m)) {
      posted_.erase(it);
      return;
    }
  unclaimed_.push_back(std::move(m));
}

int SimGridTransport::wait_any(const std::vector<Op*>& ops, double deadline) {
  std::unique_lock<sg4::Mutex> lock(*mutex_);
  for (;;) {
    bool receives_pending = false;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!ops[i]) continue;
      if (auto* r = dynamic_cast<RecvOp*>(ops[i])) {
        if (r->done) return static_cast<int>(i);
        receives_pending = true;
      } else {
        return static_cast<int>(i);  // a send
      }
    }
    if (!receives_pending || now() >= deadline) return -1;
    if (deadline > 1e300)
      arrived_->wait(lock);
    else
      arrived_->wait_until(lock, deadline);
  }
}

void SimGridTransport::before_reduce(size_t elements) {
  const double flop = static_cast<double>(elements) * payload_scale_ * flop_per_element_;
  if (flop > 0) sg4::this_actor::execute(flop);
  const double delay = delay_.next();
  if (delay > 0) sg4::this_actor::sleep_for(delay);
}

}  // namespace vitddp::sim
