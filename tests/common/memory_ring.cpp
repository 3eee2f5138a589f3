#include "common/memory_ring.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "framework/core/error.h"

namespace vitddp::testing {

using straggler::Channel;
using straggler::RingTransport;

class MemoryRingWorld::RecvOp final : public RingTransport::Op {
 public:
  RecvOp(MemoryRingWorld& world, int to, std::vector<int> from, Channel channel, uint64_t tag, void* data, size_t bytes)
      : world(world), to(to), from(std::move(from)), channel(channel), tag(tag), data(data), bytes(bytes) {}
  ~RecvOp() override {
    if (!done) world.cancel(this);
  }
  int source() const override { return source_rank; }
  MemoryRingWorld& world;
  const int to;
  const std::vector<int> from;
  const Channel channel;
  const uint64_t tag;
  void* const data;
  const size_t bytes;
  bool done = false;  // guarded by world.mutex_
  int source_rank = -1;
};

namespace {
class SendOp final : public RingTransport::Op {
 public:
  int source() const override { return -1; }
};

bool accepts(const std::vector<int>& from, int rank) { return std::find(from.begin(), from.end(), rank) != from.end(); }
}  // namespace

class MemoryRingWorld::Transport final : public RingTransport {
 public:
  Transport(MemoryRingWorld& world, int rank) : world_(world), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return world_.size_; }
  double now() override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - world_.start_).count();
  }
  std::unique_ptr<Op> post_send(int to, Channel channel, uint64_t tag, const void* data, size_t bytes) override {
    VITDDP_CHECK(to >= 0 && to < world_.size_ && to != rank_, "memory ring: rank ", rank_, " sends to ", to);
    world_.deliver(rank_, to, channel, tag, data, bytes);
    return std::make_unique<SendOp>();
  }
  std::unique_ptr<Op> post_recv(const std::vector<int>& from, Channel channel, uint64_t tag, void* data,
                                size_t bytes) override {
    auto op = std::make_unique<RecvOp>(world_, rank_, from, channel, tag, data, bytes);
    world_.post_recv(op.get());
    return op;
  }
  int wait_any(const std::vector<Op*>& ops, double deadline) override {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                                std::chrono::duration<double>(world_.timeout_seconds_));
    std::unique_lock<std::mutex> lock(world_.mutex_);
    for (;;) {
      for (size_t i = 0; i < ops.size(); ++i) {
        auto* r = dynamic_cast<RecvOp*>(ops[i]);
        if (ops[i] && (!r || r->done)) return static_cast<int>(i);
      }
      const auto now_point = std::chrono::steady_clock::now();
      if (now() >= deadline) return -1;
      if (now_point >= give_up)
        throw Error("memory ring: rank " + std::to_string(rank_) + " saw nothing complete within the timeout",
                    ErrorKind::kTimeout);
      auto until = give_up;
      if (deadline < 1e300) {
        const auto d = world_.start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                           std::chrono::duration<double>(deadline));
        until = std::min(until, d);
      }
      world_.changed_.wait_until(lock, until);
    }
  }
  void before_reduce(size_t) override {
    const double d = world_.delays_[static_cast<size_t>(rank_)];
    if (d > 0) std::this_thread::sleep_for(std::chrono::duration<double>(d));
  }

 private:
  MemoryRingWorld& world_;
  const int rank_;
};

MemoryRingWorld::MemoryRingWorld(int size, double timeout_seconds)
    : size_(size), timeout_seconds_(timeout_seconds), start_(std::chrono::steady_clock::now()),
      delays_(static_cast<size_t>(size), 0.0) {
  for (int r = 0; r < size; ++r) transports_.push_back(std::make_unique<Transport>(*this, r));
}

MemoryRingWorld::~MemoryRingWorld() = default;

straggler::RingTransport& MemoryRingWorld::transport(int rank) { return *transports_.at(static_cast<size_t>(rank)); }

void MemoryRingWorld::set_reduce_delay(int rank, double seconds) { delays_.at(static_cast<size_t>(rank)) = seconds; }

size_t MemoryRingWorld::undelivered() {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n = 0;
  for (const auto& [key, q] : queued_) n += q.size();
  return n;
}

size_t MemoryRingWorld::unmatched() {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n = 0;
  for (const auto& [key, q] : waiting_) n += q.size();
  return n;
}

void MemoryRingWorld::deliver(int from, int to, Channel channel, uint64_t tag, const void* data, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const Key key{to, static_cast<int>(channel), tag};
  auto& waiting = waiting_[key];
  for (auto it = waiting.begin(); it != waiting.end(); ++it) {
    RecvOp* op = *it;
    if (!accepts(op->from, from)) continue;
    VITDDP_CHECK(op->bytes == bytes, "memory ring: ", bytes, " bytes from ", from, " for a receive of ", op->bytes);
    if (bytes > 0) std::memcpy(op->data, data, bytes);
    op->done = true;
    op->source_rank = from;
    waiting.erase(it);
    changed_.notify_all();
    return;
  }
  const auto* p = static_cast<const unsigned char*>(data);
  queued_[key].push_back({from, std::vector<unsigned char>(p, p + bytes)});
}

void MemoryRingWorld::post_recv(RecvOp* op) {
  std::lock_guard<std::mutex> lock(mutex_);
  const Key key{op->to, static_cast<int>(op->channel), op->tag};
  auto& queued = queued_[key];
  for (auto it = queued.begin(); it != queued.end(); ++it) {
    if (!accepts(op->from, it->from)) continue;
    VITDDP_CHECK(op->bytes == it->bytes.size(), "memory ring: ", it->bytes.size(), " bytes from ", it->from,
                 " for a receive of ", op->bytes);
    if (op->bytes > 0) std::memcpy(op->data, it->bytes.data(), op->bytes);
    op->done = true;
    op->source_rank = it->from;
    queued.erase(it);
    return;
  }
  waiting_[key].push_back(op);
}

void MemoryRingWorld::cancel(RecvOp* op) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& waiting = waiting_[{op->to, static_cast<int>(op->channel), op->tag}];
  waiting.erase(std::remove(waiting.begin(), waiting.end(), op), waiting.end());
}

}  // namespace vitddp::testing
