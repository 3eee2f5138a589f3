#include "distributed/gloo/pg_gloo.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

#include "distributed/file_store.h"
#include "distributed/gloo/gloo_ring_transport.h"
#include "distributed/straggler/bypass_ring.h"
#include "distributed/wait_board.h"
#include "framework/core/error.h"
#include "framework/core/scalar_types.h"

namespace vitddp {
namespace {

constexpr std::chrono::milliseconds kStorePoll{10};
constexpr std::chrono::milliseconds kWatchPeriod{200};

// Gloo's rendezvous store over our FileStore, with every key under `prefix`.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(FileStore& store, std::string prefix, std::chrono::milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string value = store_.get(prefix_ + key, timeout_);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    // FileStore::get does the polling and names the missing key in its timeout error.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (const auto& key : keys) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      store_.get(prefix_ + key, std::max(left, std::chrono::milliseconds(0)));
    }
  }

 private:
  FileStore& store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::string(value) : fallback;
}

// Note [Gloo error kinds]
// Gloo reports both a closed connection and a timed-out receive as gloo::IoException; only the
// message tells them apart ("Timed out waiting ..."). A timeout means a peer is alive but never
// sent (it hangs, or it issued a different collective); anything else on the transport means a
// peer went away. EnforceNotMet is an invariant inside Gloo, which on a healthy transport means
// the ranks disagree on the collective (different sizes): reported as kInternal.
Error classify(const std::string& what, const std::exception& e, ErrorKind kind, std::chrono::milliseconds timeout,
               const std::string& late = "") {
  std::string hint;
  if (kind == ErrorKind::kTimeout) {
    hint = detail::concat(" (no progress within the ", timeout.count(), " ms timeout: ",
                          late.empty() ? std::string("a peer hangs or issued a different collective") : late, ")");
  } else if (kind == ErrorKind::kPeer) {
    hint = " (a peer process exited or lost its connection)";
  }
  return Error(what + " failed: " + e.what() + hint, kind);
}

ErrorKind io_error_kind(const gloo::IoException& e) {
  return std::strstr(e.what(), "Timed out") ? ErrorKind::kTimeout : ErrorKind::kPeer;
}

template <typename T>
void sum_into(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<T*>(c);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  if constexpr (std::is_same_v<T, bf16_t> || std::is_same_v<T, f16_t>) {
    for (size_t i = 0; i < n; ++i) out[i] = T(static_cast<float>(x[i]) + static_cast<float>(y[i]));
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
  }
}

template <typename T>
void min_into(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<T*>(c);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  if constexpr (std::is_same_v<T, bf16_t> || std::is_same_v<T, f16_t>) {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(y[i]) < static_cast<float>(x[i]) ? y[i] : x[i];
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = y[i] < x[i] ? y[i] : x[i];
  }
}

template <typename T>
void divide_by(T* data, size_t n, int divisor) {
  if constexpr (std::is_same_v<T, bf16_t> || std::is_same_v<T, f16_t>) {
    for (size_t i = 0; i < n; ++i) data[i] = T(static_cast<float>(data[i]) / static_cast<float>(divisor));
  } else {
    for (size_t i = 0; i < n; ++i) data[i] = data[i] / static_cast<T>(divisor);
  }
}

void check_cpu_contiguous(const Tensor& t, const char* op) {
  VITDDP_CHECK(t.defined(), op, ": the tensor is undefined");
  check_tensor(t.device().is_cpu() && t.is_contiguous(), op, "a contiguous CPU tensor", t);
}

std::atomic<int> g_group_count{0};

// Note [SIGPIPE]
// Gloo writes to its sockets without MSG_NOSIGNAL, so a write to a peer that has just exited
// raises SIGPIPE, whose default action kills this process before Gloo can report the error.
// Rather than ignoring SIGPIPE for the whole program, the constructor blocks it in its own
// thread while it creates Gloo's event-loop thread and our worker thread (both inherit the
// mask, so their writes fail with EPIPE and become a kPeer error) and while it connects; a
// SIGPIPE raised on the constructor's thread meanwhile is discarded before the mask is restored.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &previous_);
  }
  ~SigpipeBlocked() {
    if (!sigismember(&previous_, SIGPIPE)) {
      struct timespec zero = {0, 0};
      while (sigtimedwait(&pipe_, nullptr, &zero) == SIGPIPE) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_;
  sigset_t previous_;
};

}  // namespace

// ---- GlooWork ----

class ProcessGroupGloo::GlooWork final : public Work {
 public:
  GlooWork(std::string what, std::function<void(uint32_t)> body, uint32_t tag)
      : what_(std::move(what)), body_(std::move(body)), tag_(tag) {}

  static std::shared_ptr<GlooWork> completed(std::string what) {
    auto w = std::make_shared<GlooWork>(std::move(what), nullptr, 0);
    w->finished_ = true;
    return w;
  }

  void wait() override {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_cv_.wait(lock, [&] { return finished_; });
    if (error_) std::rethrow_exception(error_);
  }
  bool done() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return finished_;
  }

  const std::string& what() const { return what_; }
  uint32_t seq() const { return tag_; }

  // Worker thread: runs the collective, or fails at once with `skip` when the group is broken.
  // Returns the error (null on success). On a timeout, `board` names the late ranks.
  std::exception_ptr run(std::chrono::milliseconds timeout, std::exception_ptr skip, const WaitBoard* board) {
    std::exception_ptr error = skip;
    if (!error) {
      try {
        body_(tag_);
      } catch (const Error& e) {
        // The bypass ring's own timeout: named like Gloo's (Note [Naming the late rank]).
        const std::string late = e.kind() == ErrorKind::kTimeout && board ? board->describe_late(tag_) : "";
        error = late.empty() ? std::current_exception()
                             : std::make_exception_ptr(Error(what_ + ": " + e.what() + "; " + late, ErrorKind::kTimeout));
      } catch (const gloo::IoException& e) {
        const ErrorKind kind = io_error_kind(e);
        const std::string late = kind == ErrorKind::kTimeout && board ? board->describe_late(tag_) : "";
        error = std::make_exception_ptr(classify(what_, e, kind, timeout, late));
      } catch (const gloo::Exception& e) {
        error = std::make_exception_ptr(classify(what_, e, ErrorKind::kPeer, timeout));
      } catch (const std::exception& e) {
        error = std::make_exception_ptr(classify(what_, e, ErrorKind::kInternal, timeout));
      }
    }
    finish(error);
    return error;
  }

  void finish(std::exception_ptr error) {
    std::function<void(uint32_t)> body;  // released outside the lock: it holds the tensors
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = error;
      finished_ = true;
      body.swap(body_);
    }
    finished_cv_.notify_all();
  }

 private:
  std::string what_;
  std::function<void(uint32_t)> body_;  // captures the tensors by value, so they outlive the call
  uint32_t tag_;
  std::mutex mutex_;
  std::condition_variable finished_cv_;
  bool finished_ = false;
  std::exception_ptr error_;
};

// ---- construction ----

ProcessGroupGloo::ProcessGroupGloo(const ProcessGroupOptions& options)
    : ProcessGroup(options.rank, options.world_size), timeout_(options.timeout), cpu_allreduce_(options.cpu_allreduce),
      bypass_wait_seconds_(options.bypass_wait.count()),
      ring_delay_(options.ring_reduce_delay.count(), options.ring_late_reduce) {
  VITDDP_CHECK(options.world_size >= 1, "ProcessGroupGloo: world size must be at least 1, got ",
               options.world_size);
  VITDDP_CHECK(options.rank >= 0 && options.rank < options.world_size, "ProcessGroupGloo: rank ", options.rank,
               " is outside [0, ", options.world_size, ")");
  VITDDP_CHECK(options.timeout.count() > 0, "ProcessGroupGloo: the timeout must be positive, got ",
               options.timeout.count(), " ms");
  // Every rank creates its groups in the same order, so the count names the same group on all.
  const int instance = g_group_count.fetch_add(1);
  SigpipeBlocked sigpipe_blocked;  // See Note [SIGPIPE]
  if (options.world_size > 1) {
    VITDDP_CHECK(!options.rendezvous.empty(), "ProcessGroupGloo: a rendezvous folder is required for ",
                 options.world_size, " ranks");
    FileStore store(options.rendezvous);
    StoreAdapter adapter(store, "gloo" + std::to_string(instance) + "/", timeout_);

    gloo::transport::tcp::attr attr;
    std::string where;
    const std::string iface = env_or("VITDDP_GLOO_IFACE", "");
    if (!iface.empty()) {
      attr.iface = iface;
      where = "interface " + iface;
    } else {
      attr.hostname = env_or("VITDDP_GLOO_HOST", "127.0.0.1");
      where = "host " + attr.hostname;
    }
    std::shared_ptr<gloo::transport::Device> device;
    try {
      device = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      throw Error(detail::concat("ProcessGroupGloo: cannot open a TCP device on ", where, ": ", e.what(),
                                 " (set VITDDP_GLOO_HOST or VITDDP_GLOO_IFACE)"));
    }
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world_size);
    context->setTimeout(timeout_);
    const std::string what = detail::concat("ProcessGroupGloo: rendezvous of rank ", options.rank, " of ",
                                            options.world_size, " in '", options.rendezvous, "' on ", where);
    try {
      context->connectFullMesh(adapter, device);
    } catch (const Error&) {
      throw;  // the store's timeout names the missing key
    } catch (const gloo::IoException& e) {
      throw classify(what, e, io_error_kind(e), timeout_);
    } catch (const std::exception& e) {
      throw classify(what, e, ErrorKind::kPeer, timeout_);
    }
    context_ = std::move(context);
    board_ = std::make_unique<WaitBoard>(options.rendezvous, "gloo" + std::to_string(instance), options.rank,
                                         options.world_size);
  }
  worker_ = std::thread([this] { worker_loop(); });
  if (board_) watcher_ = std::thread([this] { watch_loop(); });
}

ProcessGroupGloo::~ProcessGroupGloo() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queue_changed_.notify_all();
  watch_wake_.notify_all();
  worker_.join();
  if (watcher_.joinable()) watcher_.join();
  context_.reset();
}

// ---- the worker ----

void ProcessGroupGloo::worker_loop() {
  std::exception_ptr broken;  // the first failure; see the file header
  while (true) {
    std::shared_ptr<GlooWork> work;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queue_changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      work = std::move(queue_.front());
      queue_.pop_front();
      running_ = work;
      running_since_ = std::chrono::steady_clock::now();
    }
    std::exception_ptr skip;
    if (broken) {
      try {
        std::rethrow_exception(broken);
      } catch (const Error& e) {
        skip = std::make_exception_ptr(
            Error(work->what() + " skipped: the group is broken after an earlier failure: " + e.what(), e.kind()));
      }
    }
    std::exception_ptr error = work->run(timeout_, skip, board_.get());
    if (error && !broken) broken = error;
    std::lock_guard<std::mutex> lock(mutex_);
    running_.reset();
  }
}

// Posts to the wait board once per collective that runs for longer than kWaitReportAfter.
// Wakes every kWatchPeriod; reads only what the worker sets under the mutex.
// See Note [Naming the late rank] in distributed/wait_board.cpp.
void ProcessGroupGloo::watch_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  int64_t posted = -1;
  while (!watch_wake_.wait_for(lock, kWatchPeriod, [&] { return stopping_; })) {
    if (!running_ || static_cast<int64_t>(running_->seq()) == posted) continue;
    if (std::chrono::steady_clock::now() - running_since_ < kWaitReportAfter) continue;
    const uint32_t seq = running_->seq();
    const std::string what = running_->what();
    posted = seq;
    lock.unlock();
    board_->post_waiting(seq, what);
    lock.lock();
  }
}

std::shared_ptr<Work> ProcessGroupGloo::enqueue(const std::string& what, std::function<void(uint32_t)> body) {
  std::shared_ptr<GlooWork> work;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t seq = next_seq_++;
    // The sequence number doubles as Gloo's tag: every rank issues the same collectives in the
    // same order, so the tags match across ranks.
    work = std::make_shared<GlooWork>(detail::concat("gloo ", what, " #", seq, " on rank ", rank(), " of ", size()),
                                      std::move(body), static_cast<uint32_t>(seq));
    queue_.push_back(work);
  }
  queue_changed_.notify_all();
  return work;
}

// ---- collectives ----

namespace {
// Reduces `n` elements at `data` over the group in place (Gloo's ring), then averages them.
template <typename T>
void gloo_allreduce(const std::shared_ptr<gloo::Context>& context, std::chrono::milliseconds timeout, uint32_t tag,
                    T* data, size_t n, ReduceOp op, int world) {
  gloo::AllreduceOptions opts(context);
  opts.setOutput(data, n);
  opts.setReduceFunction(op == ReduceOp::kMin ? &min_into<T> : &sum_into<T>);
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::allreduce(opts);
  if (op == ReduceOp::kAvg) {
    if constexpr (!std::is_same_v<T, int64_t>) divide_by(data, n, world);
  }
}
}  // namespace

std::shared_ptr<Work> ProcessGroupGloo::allreduce(const Tensor& tensor, ReduceOp op) {
  check_cpu_contiguous(tensor, "ProcessGroupGloo::allreduce");
  VITDDP_CHECK(!(op == ReduceOp::kAvg && tensor.dtype() == DType::kI64),
               "ProcessGroupGloo::allreduce: kAvg needs a floating tensor, got ", tensor.description());
  const std::string what = detail::concat("allreduce(", tensor.description(), ", ", reduce_op_name(op), ")");
  if (size() == 1 || tensor.numel() == 0) return GlooWork::completed(what);
  const int world = size();
  auto context = context_;
  const auto timeout = timeout_;
  if (cpu_allreduce_ != ProcessGroupOptions::CpuAllreduce::kGloo && tensor.dtype() == DType::kF32 &&
      op != ReduceOp::kMin) {
    straggler::BypassOptions ring;
    ring.bypass = cpu_allreduce_ == ProcessGroupOptions::CpuAllreduce::kBypassRing;
    ring.wait_seconds = bypass_wait_seconds_;
    const straggler::ReduceDelay delay = ring_delay_;  // counts this all-reduce's reduces afresh
    return enqueue(what, [tensor, op, world, context, timeout, ring, delay](uint32_t tag) {
      GlooRingTransport transport(context, tag, timeout, delay);
      float* data = static_cast<float*>(tensor.data_ptr());
      const size_t n = static_cast<size_t>(tensor.numel());
      straggler::ring_allreduce(transport, data, n, ring);
      if (op == ReduceOp::kAvg) divide_by(data, n, world);
    });
  }
  return enqueue(what, [tensor, op, world, context, timeout](uint32_t tag) {
    dispatch_dtype(tensor.dtype(), [&](auto zero) {
      using T = decltype(zero);
      gloo_allreduce(context, timeout, tag, static_cast<T*>(tensor.data_ptr()), static_cast<size_t>(tensor.numel()),
                     op, world);
    });
  });
}

// Gloo's ring all-reduce over a copy of `in`, then this rank's part into `out`: the semantics of
// a reduce-scatter (CPU runs are for tests and CI, where the doubled traffic does not matter).
std::shared_ptr<Work> ProcessGroupGloo::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  const char* name = "ProcessGroupGloo::reduce_scatter";
  check_cpu_contiguous(in, name);
  check_cpu_contiguous(out, name);
  VITDDP_CHECK(!(op == ReduceOp::kAvg && in.dtype() == DType::kI64), name, ": kAvg needs a floating tensor, got ",
               in.description());
  VITDDP_CHECK(out.dtype() == in.dtype() && out.numel() * size() == in.numel(), name, ": out must be ",
               dtype_name(in.dtype()), " with in.numel() / world (", size(), ") elements for in ", in.description(),
               ", got ", out.description());
  const std::string what = detail::concat("reduce_scatter(", in.description(), ", ", reduce_op_name(op), ")");
  const int world = size();
  const int rank = this->rank();
  auto context = context_;
  const auto timeout = timeout_;
  auto body = [in, out, op, world, rank, context, timeout](uint32_t tag) {
    dispatch_dtype(in.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const auto* source = static_cast<const T*>(in.data_ptr());
      std::vector<T> reduced(source, source + in.numel());
      if (world > 1 && !reduced.empty())
        gloo_allreduce(context, timeout, tag, reduced.data(), reduced.size(), op, world);
      const auto part = static_cast<size_t>(out.numel());
      std::memmove(out.data_ptr(), reduced.data() + static_cast<size_t>(rank) * part, part * sizeof(T));
    });
  };
  if (world == 1 || in.numel() == 0) {
    body(0);
    return GlooWork::completed(what);
  }
  return enqueue(what, std::move(body));
}

std::shared_ptr<Work> ProcessGroupGloo::broadcast(const Tensor& tensor, int root) {
  check_cpu_contiguous(tensor, "ProcessGroupGloo::broadcast");
  VITDDP_CHECK(root >= 0 && root < size(), "ProcessGroupGloo::broadcast: root ", root, " is outside [0, ", size(),
               ")");
  const std::string what = detail::concat("broadcast(", tensor.description(), ", root ", root, ")");
  if (size() == 1 || tensor.numel() == 0) return GlooWork::completed(what);
  auto context = context_;
  const auto timeout = timeout_;
  return enqueue(what, [tensor, root, context, timeout](uint32_t tag) {
    gloo::BroadcastOptions opts(context);
    opts.setOutput(static_cast<uint8_t*>(tensor.data_ptr()), tensor.nbytes());
    opts.setRoot(root);
    opts.setTag(tag);
    opts.setTimeout(timeout);
    gloo::broadcast(opts);
  });
}

std::shared_ptr<Work> ProcessGroupGloo::allgather(const Tensor& in, const Tensor& out) {
  const char* op = "ProcessGroupGloo::allgather";
  check_cpu_contiguous(in, op);
  check_cpu_contiguous(out, op);
  Shape expected = in.shape();
  expected.insert(expected.begin(), size());
  VITDDP_CHECK(out.dtype() == in.dtype() && out.shape() == expected, op, ": out must be ", dtype_name(in.dtype()),
               " of shape (world=", size(), ", *in.shape()) for in ", in.description(), ", got ",
               out.description());
  const std::string what = detail::concat("allgather(", in.description(), ")");
  if (in.numel() == 0) return GlooWork::completed(what);
  if (size() == 1) {
    if (out.data_ptr() != in.data_ptr()) std::memmove(out.data_ptr(), in.data_ptr(), in.nbytes());  // in place: done
    return GlooWork::completed(what);
  }
  auto context = context_;
  const auto timeout = timeout_;
  // In place (`in` is out[rank]): Gloo copies the input into its row first, so it gets a copy.
  const bool in_place = in.data_ptr() == static_cast<uint8_t*>(out.data_ptr()) + rank() * in.nbytes();
  return enqueue(what, [in, out, in_place, context, timeout](uint32_t tag) {
    std::vector<uint8_t> own;
    if (in_place) own.assign(static_cast<uint8_t*>(in.data_ptr()), static_cast<uint8_t*>(in.data_ptr()) + in.nbytes());
    gloo::AllgatherOptions opts(context);
    opts.setInput(in_place ? own.data() : static_cast<uint8_t*>(in.data_ptr()), in.nbytes());
    opts.setOutput(static_cast<uint8_t*>(out.data_ptr()), out.nbytes());
    opts.setTag(tag);
    opts.setTimeout(timeout);
    gloo::allgather(opts);
  });
}

void ProcessGroupGloo::barrier() {
  if (size() == 1) return;
  auto context = context_;
  const auto timeout = timeout_;
  enqueue("barrier", [context, timeout](uint32_t tag) {
    gloo::BarrierOptions opts(context);
    opts.setTag(tag);
    opts.setTimeout(timeout);
    gloo::barrier(opts);
  })->wait();
}

}  // namespace vitddp
