#include "distributed/gloo/gloo_ring_transport.h"

#include <gloo/transport/unbound_buffer.h>

#include <atomic>
#include <deque>
#include <exception>
#include <functional>
#include <string>
#include <thread>

#include "framework/core/error.h"

namespace vitddp {

using straggler::Channel;

struct GlooRingTransport::Shared {
  std::mutex mutex;
  std::condition_variable completed;
};

namespace {

// Threads that each wait on one receive at a time; more are started when all are busy, and
// they stay for later collectives. Never destroyed: a thread may be in a wait at exit.
class WaiterPool {
 public:
  static WaiterPool& get() {
    static auto* pool = new WaiterPool;
    return *pool;
  }
  void run(std::function<void()> job) {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
    if (idle_ == 0) {
      std::thread([this] { loop(); }).detach();
    } else {
      changed_.notify_one();
    }
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      while (jobs_.empty()) {
        ++idle_;
        changed_.wait(lock);
        --idle_;
      }
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> jobs_;
  int idle_ = 0;
};

// A receive's state, shared with the thread that waits on it (which may outlive the op when
// the ring gives up on an error).
struct RecvState {
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  bool done = false;  // guarded by the transport's Shared::mutex
  int source = -1;
  std::exception_ptr error;
};

class RecvOp final : public straggler::RingTransport::Op {
 public:
  explicit RecvOp(std::shared_ptr<RecvState> state) : state(std::move(state)) {}
  ~RecvOp() override {
    if (!finished) state->buffer->abortWaitRecv();
  }
  int source() const override { return state->source; }
  std::shared_ptr<RecvState> state;
  bool finished = false;  // done and reported
};

class SendOp final : public straggler::RingTransport::Op {
 public:
  explicit SendOp(std::unique_ptr<gloo::transport::UnboundBuffer> buffer) : buffer(std::move(buffer)) {}
  int source() const override { return -1; }
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  bool done = false;
};

}  // namespace

GlooRingTransport::GlooRingTransport(std::shared_ptr<gloo::Context> context, uint32_t tag,
                                     std::chrono::milliseconds timeout, straggler::ReduceDelay delay)
    : context_(std::move(context)), tag_(tag), timeout_(timeout), delay_(delay),
      start_(std::chrono::steady_clock::now()), shared_(std::make_shared<Shared>()) {}

double GlooRingTransport::now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

// Gloo's slots: a prefix no Gloo algorithm uses, the collective's tag, the channel, the chunk.
uint64_t GlooRingTransport::slot(Channel channel, uint64_t tag) const {
  VITDDP_ASSERT(tag < (uint64_t{1} << 21), "bypass ring over Gloo: chunk tag ", tag, " past 2^21");
  return (uint64_t{0x5b} << 56) | (static_cast<uint64_t>(tag_) << 24) | (static_cast<uint64_t>(channel) << 21) | tag;
}

std::unique_ptr<straggler::RingTransport::Op> GlooRingTransport::post_send(int to, Channel channel, uint64_t tag,
                                                                           const void* data, size_t bytes) {
  auto buffer = context_->createUnboundBuffer(const_cast<void*>(data), bytes);
  buffer->send(to, slot(channel, tag), 0, bytes);
  return std::make_unique<SendOp>(std::move(buffer));
}

std::unique_ptr<straggler::RingTransport::Op> GlooRingTransport::post_recv(const std::vector<int>& from,
                                                                           Channel channel, uint64_t tag, void* data,
                                                                           size_t bytes) {
  auto state = std::make_shared<RecvState>();
  state->buffer = context_->createUnboundBuffer(data, bytes);
  state->buffer->recv(from, slot(channel, tag), 0, bytes);
  std::shared_ptr<Shared> shared = shared_;
  const auto timeout = timeout_;
  WaiterPool::get().run([state, shared, timeout] {
    int source = -1;
    std::exception_ptr error;
    try {
      if (!state->buffer->waitRecv(&source, timeout)) source = -1;  // aborted: the ring gave up
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(shared->mutex);
    state->done = true;
    state->source = source;
    state->error = error;
    shared->completed.notify_all();
  });
  return std::make_unique<RecvOp>(std::move(state));
}

int GlooRingTransport::wait_any(const std::vector<Op*>& ops, double deadline) {
  const auto give_up = std::chrono::steady_clock::now() + timeout_;
  std::unique_lock<std::mutex> lock(shared_->mutex);
  for (;;) {
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!ops[i]) continue;
      if (auto* r = dynamic_cast<RecvOp*>(ops[i])) {
        if (!r->state->done) continue;
        r->finished = true;
        if (r->state->error) std::rethrow_exception(r->state->error);
        return static_cast<int>(i);
      }
      auto* s = static_cast<SendOp*>(ops[i]);
      if (!s->done) {
        lock.unlock();
        s->buffer->waitSend(timeout_);  // throws past the group's timeout
        lock.lock();
        s->done = true;
      }
      return static_cast<int>(i);
    }
    if (now() >= deadline) return -1;
    auto until = give_up;
    if (deadline < 1e300)
      until = std::min(until, start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                           std::chrono::duration<double>(deadline)));
    if (shared_->completed.wait_until(lock, until) == std::cv_status::timeout &&
        std::chrono::steady_clock::now() >= give_up)
      throw Error("bypass ring over Gloo: rank " + std::to_string(rank()) + " saw nothing arrive within the " +
                      std::to_string(timeout_.count()) + " ms timeout",
                  ErrorKind::kTimeout);
  }
}

void GlooRingTransport::before_reduce(size_t) {
  const double delay = delay_.next();
  if (delay > 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay));
}

}  // namespace vitddp
