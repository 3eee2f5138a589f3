#include "distributed/nccl/pg_nccl.h"

#include <map>
#include <mutex>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <algorithm>
#include <optional>
#include <utility>

#include "distributed/file_store.h"
#include "distributed/nccl/host_copy_transport.h"
#include "distributed/nccl/nccl_check.h"
#include "distributed/wait_board.h"
#include "framework/core/thread_stacks.h"
#include "framework/cuda/check.h"

namespace vitddp {

// ---- NCCL_CHECK support ----

namespace nccl {

ErrorKind nccl_error_kind(ncclResult_t result) {
  switch (result) {
    case ncclSystemError:
    case ncclRemoteError: return ErrorKind::kPeer;
    default: return ErrorKind::kInternal;
  }
}

void throw_nccl_error(const char* call, ncclResult_t result, const char* file, int line) {
  const char* last = ncclGetLastError(nullptr);
  throw Error(detail::concat("NCCL error: ", call, " failed: ", ncclGetErrorString(result),
                             last && *last ? std::string(" (") + last + ")" : std::string(), " (", file, ":", line,
                             ")"),
              nccl_error_kind(result));
}

}  // namespace nccl

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kWatchdogPeriod{100};
constexpr std::chrono::microseconds kProgressPoll{200};
// A non-blocking communicator answers ncclInProgress to most calls for a few microseconds while
// the work is enqueued; sleeping at once added a nap of at least kProgressPoll to every
// collective, as long as a small all-reduce itself, and made bucketed 2-GPU bf16 steps
// host-bound. Spin first.
constexpr std::chrono::milliseconds kProgressSpin{5};

std::string last_error_text(ncclComm_t comm) {
  const char* last = ncclGetLastError(comm);
  return last && *last ? std::string(" (") + last + ")" : std::string();
}

// Polls a non-blocking communicator until it leaves ncclInProgress. Returns its state:
// ncclSuccess, an error, or ncclInProgress when `timeout` passed first.
ncclResult_t wait_for_nccl(ncclComm_t comm, std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  while (true) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t result = ncclCommGetAsyncError(comm, &state);
    if (result != ncclSuccess) return result;
    if (state != ncclInProgress) return state;
    const auto now = Clock::now();
    if (now >= deadline) return ncclInProgress;
    if (now - start < kProgressSpin)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(kProgressPoll);
  }
}

using cuda::DeviceScope;  // CUDA's current device is per thread

ncclDataType_t nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kF64: return ncclFloat64;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI64: return ncclInt64;
  }
  throw Error("unknown dtype", ErrorKind::kInternal);
}

// Groups created so far per (rendezvous folder, rank). Every rank creates its groups in the
// same order, so the count names the same group on all ranks, also when several ranks live in
// one process (one thread per GPU).
int next_group_instance(const std::string& rendezvous, int rank) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, int>, int> counts;
  std::lock_guard<std::mutex> lock(mutex);
  return counts[{rendezvous, rank}]++;
}

}  // namespace

// ---- NcclComm ----

struct NcclComm::AbortState {
  std::mutex mutex;
  std::condition_variable finished_cv;
  bool finished = false;
};

NcclComm NcclComm::init(int size, int rank, const ncclUniqueId& id, int device, std::chrono::milliseconds timeout) {
  NcclComm comm;
  comm.device_ = device;
  comm.timeout_ = timeout;
  DeviceScope scope(device);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a stuck initialisation can be aborted
  ncclComm_t raw = nullptr;
  ncclResult_t result = ncclCommInitRankConfig(&raw, size, id, rank, &config);
  comm.comm_ = raw;
  if (result == ncclSuccess || result == ncclInProgress) result = wait_for_nccl(raw, timeout);
  if (result == ncclSuccess) return comm;

  const std::string where = detail::concat("NCCL initialisation of rank ", rank, " of ", size, " on cuda:", device);
  if (result == ncclInProgress) {
    Error error(detail::concat(where, " did not finish within ", timeout.count(),
                               " ms (did every rank start, and can the ranks reach each other?)"),
                ErrorKind::kTimeout);
    comm.abort(error.what());
    throw error;
  }
  Error error(detail::concat(where, " failed: ", ncclGetErrorString(result), last_error_text(raw)), ErrorKind::kPeer);
  if (raw) comm.abort(error.what());
  throw error;
}

NcclComm::~NcclComm() {
  finalize_and_destroy();
  wait_for_abort();
}

NcclComm::NcclComm(NcclComm&& o) noexcept
    : comm_(std::exchange(o.comm_, nullptr)), device_(o.device_), timeout_(o.timeout_), abort_(std::move(o.abort_)) {}

NcclComm& NcclComm::operator=(NcclComm&& o) noexcept {
  if (this != &o) {
    finalize_and_destroy();
    wait_for_abort();
    comm_ = std::exchange(o.comm_, nullptr);
    device_ = o.device_;
    timeout_ = o.timeout_;
    abort_ = std::move(o.abort_);
  }
  return *this;
}

void NcclComm::abort(const std::string& reason) {
  ncclComm_t comm = std::exchange(comm_, nullptr);
  if (!comm) return;
  auto state = std::make_shared<AbortState>();
  abort_ = state;
  const int device = device_;
  std::thread([comm, device, state] {
    CUDA_WARN(cudaSetDevice(device));
    NCCL_WARN(ncclCommAbort(comm));
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      state->finished = true;
    }
    state->finished_cv.notify_all();
  }).detach();
  std::thread([state, reason] {
    std::unique_lock<std::mutex> lock(state->mutex);
    if (!state->finished_cv.wait_for(lock, std::chrono::seconds(kAbortGraceSeconds), [&] { return state->finished; })) {
      std::fprintf(stderr, "vitddp: ncclCommAbort did not return within %d s after: %s; exiting with code %d\n",
                   kAbortGraceSeconds, reason.c_str(), kAbortHangExitCode);
      std::fflush(stderr);
      std::_Exit(kAbortHangExitCode);
    }
  }).detach();
}

void NcclComm::wait_for_abort() noexcept {
  if (!abort_) return;
  std::unique_lock<std::mutex> lock(abort_->mutex);
  // The watcher thread ends the process if the abort outlives the grace period.
  abort_->finished_cv.wait(lock, [&] { return abort_->finished; });
  lock.unlock();
  abort_.reset();
}

void NcclComm::finalize_and_destroy() noexcept {
  if (!comm_) return;
  DeviceScope scope(device_);
  // Finalize flushes the operations already issued; on a non-blocking communicator it returns
  // ncclInProgress and we poll until it is done (or give up and abort after the timeout).
  ncclResult_t result = ncclCommFinalize(comm_);
  if (result == ncclSuccess || result == ncclInProgress) result = wait_for_nccl(comm_, timeout_);
  if (result == ncclSuccess) {
    NCCL_WARN(ncclCommDestroy(comm_));
    comm_ = nullptr;
    return;
  }
  std::fprintf(stderr, "vitddp: warning: ncclCommFinalize %s; aborting the communicator\n",
               result == ncclInProgress ? "did not finish within the timeout" : ncclGetErrorString(result));
  try {
    abort("ncclCommFinalize failed in the destructor");
  } catch (const std::exception& e) {  // std::thread could not start: abort here and now
    std::fprintf(stderr, "vitddp: warning: %s; aborting on this thread\n", e.what());
    NCCL_WARN(ncclCommAbort(comm_));
    comm_ = nullptr;
  }
}

// ---- the state shared by the group, its Work handles and the watchdog ----

// Note [NCCL watchdog]
// Every collective is appended to `in_flight` with its completion event and start time; the
// comm stream runs them in that order, so the first entry whose event has not fired is the
// oldest unfinished one, and it alone is checked against the timeout. The watchdog thread runs
// check() every 100 ms; the caller's thread runs it in every collective and in Work::wait/done.
// A failure is recorded once (`failure`), the communicator is aborted, and every later call
// rethrows that error. Tensors kept alive by `in_flight` are released only on the caller's
// threads (`release_finished`), never on the watchdog thread, so the caching allocator sees
// frees where it expects them.
struct ProcessGroupNccl::Shared {
  struct InFlight {
    uint64_t seq;
    std::string what;
    Clock::time_point start;
    std::shared_ptr<cuda::Event> done;
    std::vector<Tensor> keep;  // the collective's tensors, alive until it is done
  };

  std::mutex mutex;
  NcclComm comm;
  std::optional<Error> failure;
  std::deque<InFlight> in_flight;  // issue order
  // Note [Finishing an enqueue later]
  // A non-blocking communicator answers ncclInProgress to every collective and hands it to a
  // thread of its own, which launches the kernel on the comm stream some time later; a caller
  // that waited for it paid several times a blocking communicator's host time per collective
  // (`--op-breakdown`; docs/performance.md). The caller no longer waits there: the collective
  // stays `pending` until the group's next call, or a wait on its Work, finishes it (polls until
  // NCCL has taken it, then records its completion event, which must follow NCCL's kernel on
  // the comm stream, and moves it to in_flight). Meanwhile the host goes on issuing backward,
  // and by the next bucket NCCL's thread is long done. NCCL asks for exactly this: no new call
  // on the communicator until the last one has left ncclInProgress. The watchdog holds a
  // pending collective to the timeout too.
  struct Pending {
    uint64_t seq;
    std::string what;
    Clock::time_point start;
    std::shared_ptr<cuda::Event> done;
    std::vector<Tensor> keep;
    cudaStream_t stream;
  };
  std::optional<Pending> pending;
  double finish_wait_seconds = 0;  // the callers' time in finish_pending(), for issue_stats()
  int rank = 0;
  int size = 1;
  // Note [Naming the late rank] (distributed/wait_board.cpp): the oldest unfinished collective,
  // once it has been in flight for kWaitReportAfter, is posted by the watchdog (outside the mutex).
  std::unique_ptr<WaitBoard> board;
  int64_t posted_seq = -1;
  // transport host-copy: the all-reduces' transport (Note [Host-copy all-reduce]); its waits
  // are released when the group fails, so its streams drain.
  std::unique_ptr<HostCopyTransport> host_copy;

  // All below: with `mutex` held.
  [[noreturn]] void fail(const Error& error) {
    failure = error;
    if (host_copy) host_copy->release_waits();
    comm.abort(error.what());
    throw error;
  }
  [[noreturn]] void fail_enqueue_timeout(uint64_t seq, const std::string& what, std::chrono::milliseconds timeout) {
    fail(Error(detail::concat("NCCL ", what, " #", seq, " on rank ", rank, " of ", size,
                              " could not be enqueued within the ", timeout.count(),
                              " ms timeout; the communicator was aborted"),
               ErrorKind::kTimeout));
  }
  [[noreturn]] void fail_call(uint64_t seq, const std::string& what, ncclResult_t result) {
    fail(Error(detail::concat("NCCL ", what, " #", seq, " on rank ", rank, " of ", size, " failed: ",
                              ncclGetErrorString(result), last_error_text(comm.get()),
                              "; the communicator was aborted"),
               result == ncclInvalidArgument || result == ncclInvalidUsage ? ErrorKind::kInternal : ErrorKind::kPeer));
  }

  // Throws the recorded failure, or detects a new one (async NCCL error, late collective).
  // Returns the oldest unfinished collective (oldest_unfinished()), or null.
  const InFlight* check(std::chrono::milliseconds timeout) {
    if (failure) throw *failure;
    if (!comm.get()) return nullptr;
    ncclResult_t state = ncclSuccess;
    ncclResult_t result = ncclCommGetAsyncError(comm.get(), &state);
    if (result != ncclSuccess) state = result;
    if (state != ncclSuccess && state != ncclInProgress) {
      fail(Error(detail::concat("NCCL reported an error on rank ", rank, " of ", size, ": ", ncclGetErrorString(state),
                                last_error_text(comm.get()),
                                " (a peer process exited or its connection failed); the communicator was aborted"),
                 ErrorKind::kPeer));
    }
    if (host_copy) {
      const int peer = host_copy->peer_failed();
      if (peer >= 0)
        fail(Error(detail::concat("rank ", peer, "'s host-copy transport failed, so the all-reduces in flight carry "
                                  "no valid result (see rank ", peer, "'s error)"),
                   ErrorKind::kPeer));
    }
    // NCCL has taken the pending collective: it is in flight like the others (timed from its
    // start, and named to the wait board), whenever this rank's thread calls the group next.
    if (pending && state == ncclSuccess) move_pending_to_in_flight();
    const auto now = Clock::now();
    if (pending && now - pending->start > timeout) fail_enqueue_timeout(pending->seq, pending->what, timeout);
    const InFlight* entry = oldest_unfinished();
    if (entry && now - entry->start > timeout) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - entry->start);
      const std::string late = board ? board->describe_late(entry->seq) : "";
      fail(Error(detail::concat("NCCL ", entry->what, " #", entry->seq, " on rank ", rank, " of ", size,
                                " did not complete within the ", timeout.count(), " ms timeout (", waited.count(),
                                " ms so far): ",
                                late.empty() ? std::string("a peer is stuck, exited, or issued a different collective")
                                             : late,
                                "; the communicator was aborted"),
                 ErrorKind::kTimeout));
    }
    return entry;
  }

  // The first in-flight collective whose completion event has not fired, or null. Only it is
  // ever late: later entries run after it on the comm stream. A failed event query aborts.
  const InFlight* oldest_unfinished() {
    for (const InFlight& entry : in_flight) {
      bool finished = false;
      try {
        finished = entry.done->query();
      } catch (const Error& e) {
        fail(Error(detail::concat("NCCL ", entry.what, " #", entry.seq, " on rank ", rank, ": ", e.what()),
                   ErrorKind::kInternal));
      }
      if (!finished) return &entry;
    }
    return nullptr;
  }

  // The oldest unfinished collective if it has waited for kWaitReportAfter and was not posted
  // yet (then marked as posted); nullopt otherwise.
  std::optional<std::pair<uint64_t, std::string>> wait_to_post(const InFlight* oldest) {
    if (!board || failure || !oldest) return std::nullopt;
    if (static_cast<int64_t>(oldest->seq) == posted_seq || Clock::now() - oldest->start < kWaitReportAfter)
      return std::nullopt;
    posted_seq = static_cast<int64_t>(oldest->seq);
    return std::make_pair(oldest->seq, oldest->what);
  }

  // What the watchdog saw, for the heartbeat: the pending collective, or the oldest unfinished
  // one, and its age.
  std::string describe_oldest(const InFlight* oldest) const {
    const auto now = Clock::now();
    auto age = [&](Clock::time_point start) {
      return std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count();
    };
    if (pending) return detail::concat("NCCL ", pending->what, " #", pending->seq, " not yet taken by NCCL after ",
                                       age(pending->start), " ms");
    if (oldest) return detail::concat("NCCL ", oldest->what, " #", oldest->seq, " in flight for ", age(oldest->start), " ms");
    return "no collective in flight";
  }

  void release_finished() {
    while (!in_flight.empty() && in_flight.front().done->query()) in_flight.pop_front();
  }

  // Before something new goes in flight: the group is healthy, the previous collective (if NCCL
  // was still taking it) is in flight, and finished ones are released. With `mutex` held.
  void settle(std::chrono::milliseconds timeout) {
    check(timeout);
    finish_pending(timeout);
    release_finished();
  }

  // The pending collective's completion event, recorded on the comm stream (after NCCL's
  // kernel: NCCL has taken it), and the collective in flight. Never frees its tensors (the
  // watchdog may call it); if the record fails they are leaked, as the stream may still read them.
  void move_pending_to_in_flight() {
    Pending p = std::move(*pending);
    pending.reset();
    try {
      p.done->record(p.stream);
    } catch (...) {
      (void)new std::vector<Tensor>(std::move(p.keep));
      throw;
    }
    in_flight.push_back({p.seq, p.what, p.start, p.done, std::move(p.keep)});
  }

  // See Note [Finishing an enqueue later]. With `mutex` held; throws (aborting) when NCCL fails
  // the collective or does not take it within the timeout.
  void finish_pending(std::chrono::milliseconds timeout) {
    if (!pending) return;
    Pending p = std::move(*pending);
    pending.reset();  // not pending while we wait (check() must not move it meanwhile)
    ncclResult_t result = failure || !comm.get() ? ncclInternalError : ncclSuccess;
    if (result == ncclSuccess) {
      const auto waited_from = Clock::now();
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(timeout - (waited_from - p.start));
      result = wait_for_nccl(comm.get(), std::max(left, std::chrono::milliseconds(1)));
      finish_wait_seconds += std::chrono::duration<double>(Clock::now() - waited_from).count();
    }
    // In flight whatever happened, so that the tensors are released only once the stream has
    // passed whatever NCCL did launch.
    const uint64_t seq = p.seq;
    const std::string what = p.what;
    pending = std::move(p);
    move_pending_to_in_flight();
    if (failure) throw *failure;
    if (result == ncclInProgress) fail_enqueue_timeout(seq, what, timeout);
    if (result != ncclSuccess) fail_call(seq, what, result);
  }
};

namespace {

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<ProcessGroupNccl::Shared> shared, std::shared_ptr<cuda::Event> done,
           std::chrono::milliseconds timeout, uint64_t seq, std::vector<Tensor> captured_keep = {})
      : shared_(std::move(shared)), done_(std::move(done)), timeout_(timeout), seq_(seq),
        captured_keep_(std::move(captured_keep)) {}
  // A captured collective's tensors are freed in the graph after it: the current stream, still
  // capturing, waits for the collective first (Note [Collectives in a CUDA graph]).
  ~NcclWork() override {
    if (captured_keep_.empty()) return;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    cudaStream_t stream = nullptr;
    try {
      stream = cuda::current_stream();
    } catch (...) {
      return;  // no stream to order the frees on: they follow the work already there
    }
    if (cudaStreamIsCapturing(stream, &capture) == cudaSuccess && capture == cudaStreamCaptureStatusActive)
      CUDA_WARN(cudaStreamWaitEvent(stream, done_->get(), 0));
  }

  void wait() override {
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      shared_->check(timeout_);
      finish_if_pending();
    }
    done_->block(cuda::current_stream());  // See Note [NCCL stream handshake]
  }

  bool done() override {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->check(timeout_);
    finish_if_pending();
    return done_->query();
  }

 private:
  // With the mutex held: this collective's completion event is recorded only once NCCL took it.
  void finish_if_pending() {
    if (shared_->pending && shared_->pending->seq == seq_) shared_->finish_pending(timeout_);
  }

  std::shared_ptr<ProcessGroupNccl::Shared> shared_;
  std::shared_ptr<cuda::Event> done_;
  std::chrono::milliseconds timeout_;
  uint64_t seq_;
  std::vector<Tensor> captured_keep_;  // a captured collective's tensors (in_flight keeps the others')
};

}  // namespace

// ---- construction and teardown ----

ProcessGroupNccl::ProcessGroupNccl(const ProcessGroupOptions& options)
    : ProcessGroup(options.rank, options.world_size), timeout_(options.timeout) {
  VITDDP_CHECK(options.world_size >= 1, "ProcessGroupNccl: world size must be at least 1, got ", options.world_size);
  VITDDP_CHECK(options.rank >= 0 && options.rank < options.world_size, "ProcessGroupNccl: rank ", options.rank,
               " is outside [0, ", options.world_size, ")");
  VITDDP_CHECK(options.timeout.count() > 0, "ProcessGroupNccl: the timeout must be positive, got ",
               options.timeout.count(), " ms");
  device_ = cuda::current_device();
  const int instance = next_group_instance(options.rendezvous, options.rank);

  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (options.world_size == 1) {
    NCCL_CHECK(ncclGetUniqueId(&id));
  } else {
    VITDDP_CHECK(!options.rendezvous.empty(), "ProcessGroupNccl: a rendezvous folder is required for ",
                 options.world_size, " ranks");
    FileStore store(options.rendezvous);
    const std::string key = "nccl" + std::to_string(instance) + "/unique_id";
    if (options.rank == 0) {
      NCCL_CHECK(ncclGetUniqueId(&id));
      store.set(key, std::string(id.internal, sizeof(id.internal)));
    } else {
      const std::string value = store.get(key, options.timeout);
      VITDDP_CHECK(value.size() == sizeof(id.internal), "ProcessGroupNccl: the NCCL id in '", options.rendezvous,
                   "' has ", value.size(), " bytes, expected ", sizeof(id.internal),
                   " (is the folder shared with another run?)");
      std::memcpy(id.internal, value.data(), sizeof(id.internal));
    }
  }

  shared_ = std::make_shared<Shared>();
  shared_->rank = options.rank;
  shared_->size = options.world_size;
  shared_->comm = NcclComm::init(options.world_size, options.rank, id, device_, timeout_);
  if (options.world_size > 1)
    shared_->board = std::make_unique<WaitBoard>(options.rendezvous, "nccl" + std::to_string(instance), options.rank,
                                                 options.world_size);
  host_copy_overlap_ = options.host_copy_overlap;
  if (options.host_copy_allreduce && options.world_size > 1) {
    HostCopyOptions host_copy;
    host_copy.rank = options.rank;
    host_copy.world_size = options.world_size;
    host_copy.device = device_;
    host_copy.rendezvous = options.rendezvous;
    host_copy.key_prefix = "nccl" + std::to_string(instance) + "/";
    host_copy.timeout = options.timeout;
    host_copy.reduce_beside = options.host_copy_reduce_beside;
    shared_->host_copy = std::make_unique<HostCopyTransport>(host_copy);
  }

  comm_stream_ = cuda::Stream::create(device_, cuda::communication_priority());  // Note [Stream priorities]
  ready_ = cuda::Event::create();
  barrier_buffer_ = Tensor::zeros({1}, DType::kF32, Device::cuda(device_));
  // Nothing legitimate holds the watchdog longer than a caller's bounded wait for NCCL (the
  // timeout) plus an abort's grace period; the second grace period is margin.
  prepare_thread_stacks();  // so that a stall's dump does not load the unwinder in the middle of it
  const auto heartbeat_limit = timeout_ + std::chrono::seconds(2 * kAbortGraceSeconds);
  const int rank = options.rank;
  heartbeat_ = std::make_unique<HeartbeatMonitor>(heartbeat_limit, [rank](const std::string& report) {
    std::fprintf(stderr,
                 "vitddp: rank %d: the NCCL watchdog is stuck: %s. A thread is blocked inside a CUDA or NCCL call "
                 "holding the process group; the stacks of every thread follow, then the process exits with code %d\n",
                 rank, report.c_str(), kAbortHangExitCode);
    std::fflush(stderr);
    write_thread_stacks(2);
    std::_Exit(kAbortHangExitCode);
  });
  watchdog_ = std::thread([this] { watchdog_loop(); });
}

ProcessGroupNccl::~ProcessGroupNccl() {
  {
    std::lock_guard<std::mutex> lock(watchdog_mutex_);
    watchdog_stop_ = true;
  }
  watchdog_wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();  // the monitor stays armed while a stuck watchdog is joined
  heartbeat_.reset();  // nothing beats from here on, and the teardown below may take the timeout

  std::lock_guard<std::mutex> lock(shared_->mutex);
  try {
    shared_->finish_pending(timeout_);
  } catch (const Error& e) {  // recorded and aborted; the teardown below copes
    std::fprintf(stderr, "vitddp: warning: %s\n", e.what());
  }
  // Finalize waits for the issued collectives (bounded by the timeout, then it aborts).
  shared_->comm = NcclComm();
  // After an abort the comm stream may still hold work that reads the kept tensors: release
  // them only once it is idle, and leak them (never reuse the memory) if it does not get there.
  // With host copies, also their copy streams (work the comm stream never joined after an issue
  // that failed halfway) and replayed graphs, whose host copies run on the caller's stream and
  // are watched only through in_flight: any of them may wait for a peer that left without a
  // failure seen here, until its waits are released.
  auto settled = [&] {
    if (cudaStreamQuery(comm_stream_.get()) == cudaErrorNotReady) return false;
    if (!shared_->host_copy) return true;
    for (const Shared::InFlight& entry : shared_->in_flight)
      if (cudaEventQuery(entry.done->get()) == cudaErrorNotReady) return false;
    return shared_->host_copy->idle();
  };
  auto wait_until_settled = [&] {
    const auto deadline = Clock::now() + std::chrono::seconds(kAbortGraceSeconds);
    while (!settled() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return settled();
  };
  bool idle = wait_until_settled();
  if (!idle && shared_->host_copy) {
    shared_->host_copy->release_waits();
    idle = wait_until_settled();
  }
  if (!idle) {
    std::fprintf(stderr, "vitddp: warning: the NCCL stream%s still busy at teardown; leaking its buffers\n",
                 shared_->host_copy ? " or its host copies are" : " is");
    (void)new std::deque<Shared::InFlight>(std::move(shared_->in_flight));
    (void)shared_->host_copy.release();  // its registered memory may still be read
    return;
  }
  const cudaError_t status = cudaStreamQuery(comm_stream_.get());
  if (status != cudaSuccess) {
    std::fprintf(stderr, "vitddp: warning: the NCCL stream failed: %s\n", cudaGetErrorString(status));
  }
  shared_->in_flight.clear();
  shared_->host_copy.reset();
}

std::string ProcessGroupNccl::backend() const { return shared_->host_copy ? "nccl+host-copy" : "nccl"; }

// ---- the watchdog ----

void ProcessGroupNccl::watchdog_loop() {
  CUDA_WARN(cudaSetDevice(device_));
  std::unique_lock<std::mutex> wake_lock(watchdog_mutex_);
  while (!watchdog_wake_.wait_for(wake_lock, kWatchdogPeriod, [&] { return watchdog_stop_; })) {
    try {
      std::optional<std::pair<uint64_t, std::string>> post;
      std::string seen;
      {
        std::lock_guard<std::mutex> lock(shared_->mutex);
        const ProcessGroupNccl::Shared::InFlight* oldest = shared_->check(timeout_);
        post = shared_->wait_to_post(oldest);
        seen = shared_->describe_oldest(oldest);
      }
      heartbeat_->beat(std::move(seen));
      if (post) shared_->board->post_waiting(post->first, "NCCL " + post->second);
    } catch (const Error& e) {
      // Recorded in shared_->failure (and the communicator aborted: its own grace period takes
      // over from the heartbeat); the caller's next call throws it. Say so now too: the caller
      // may be blocked somewhere else.
      heartbeat_->stop();
      std::fprintf(stderr, "vitddp: rank %d: %s\n", rank(), e.what());
      std::fflush(stderr);
      return;
    }
  }
}

void ProcessGroupNccl::check_health(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  shared_->check(timeout);
  shared_->release_finished();
}

// ---- collectives ----

void ProcessGroupNccl::check_tensor_arg(const Tensor& t, const char* op, bool allow_int) const {
  VITDDP_CHECK(t.defined(), op, ": the tensor is undefined");
  const bool on_device = t.device().is_cuda() && t.device().index == device_;
  check_tensor(on_device && t.is_contiguous(), op,
               detail::concat("a contiguous tensor on cuda:", device_, " (the group's device)").c_str(), t);
  check_tensor(allow_int || is_floating(t.dtype()), op, "a floating tensor", t);
}

// Note [NCCL stream handshake]
// Compute -> comm: an event recorded on the caller's current stream, which the comm stream
// waits for, so the collective reads the tensor only after the kernels that wrote it. Comm ->
// compute: the completion event, which Work::wait() makes the caller's current stream wait for.
// Neither blocks the host.
std::shared_ptr<Work> ProcessGroupNccl::launch(const std::string& what, std::vector<Tensor> keep,
                                               const NcclCall& call, bool via_host_copy) {
  VITDDP_CHECK(cuda::current_device() == device_, "ProcessGroupNccl: ", what, " called with cuda:",
               cuda::current_device(), " current, but the group lives on cuda:", device_);
  const auto issue_start = Clock::now();
  std::lock_guard<std::mutex> lock(shared_->mutex);
  shared_->settle(timeout_);
  const uint64_t seq = next_seq_++;
  cudaStream_t caller = cuda::current_stream();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(caller, &capture));
  ready_.record(caller);
  ready_.block(comm_stream_.get());
  if (!via_host_copy) nccl_since_host_copy_ = true;
  ncclComm_t comm = shared_->comm.get();
  if (capture == cudaStreamCaptureStatusActive) return launch_captured(what, std::move(keep), call, seq, issue_start);
  // Made before the call: nothing that can throw may come between an ncclInProgress answer and
  // the collective's becoming pending (the next call must finish it first).
  auto done = std::make_shared<cuda::Event>(cuda::Event::create());
  const ncclResult_t result = call(comm, comm_stream_.get());
  if (result != ncclSuccess && result != ncclInProgress) shared_->fail_call(seq, what, result);
  shared_->pending = Shared::Pending{seq, what, Clock::now(), done, std::move(keep), comm_stream_.get()};
  // Taken already: in flight now. In progress: see Note [Finishing an enqueue later].
  if (result == ncclSuccess) shared_->move_pending_to_in_flight();
  ++issued_.collectives;
  issued_.seconds += std::chrono::duration<double>(Clock::now() - issue_start).count();
  return std::make_shared<NcclWork>(shared_, done, timeout_, seq);
}

// Note [Collectives in a CUDA graph]
// A collective issued while the caller's stream is being captured (train/graphed_step.h) is
// recorded into the graph on the comm stream, which joins the capture through the ready event.
// Its events are capture nodes that no thread may query, so it never enters in_flight and the
// watchdog never looks at it; the replays are watched instead (watch_current_stream()). NCCL
// must have put its kernel on the stream before the capture goes on, so a non-blocking
// communicator's ncclInProgress is waited for here, not later. The Work keeps the tensors and,
// dropped while the capture runs, makes the capturing stream wait for the collective first, so
// that their frees come after it in the graph.
std::shared_ptr<Work> ProcessGroupNccl::launch_captured(const std::string& what, std::vector<Tensor> keep,
                                                        const NcclCall& call, uint64_t seq,
                                                        Clock::time_point issue_start) {
  auto done = std::make_shared<cuda::Event>(cuda::Event::create());
  ncclResult_t result = call(shared_->comm.get(), comm_stream_.get());
  if (result == ncclInProgress) result = wait_for_nccl(shared_->comm.get(), timeout_);
  if (result == ncclInProgress) shared_->fail_enqueue_timeout(seq, what, timeout_);
  if (result != ncclSuccess) shared_->fail_call(seq, what, result);
  done->record(comm_stream_.get());
  ++issued_.collectives;
  issued_.seconds += std::chrono::duration<double>(Clock::now() - issue_start).count();
  return std::make_shared<NcclWork>(shared_, done, timeout_, seq, std::move(keep));
}

void ProcessGroupNccl::watch_current_stream(const std::string& what) {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  shared_->settle(timeout_);
  auto done = std::make_shared<cuda::Event>(cuda::Event::create());
  done->record(cuda::current_stream());
  shared_->in_flight.push_back({next_seq_++, what, Clock::now(), done, {}});
}

// Note [Replaying host copies] (host_copy_transport.cpp): the rings aligned before a capture,
// at its end (inside the graph) and before every replay.
void ProcessGroupNccl::align_host_copy_rings() {
  // Issued on every rank even when this rank's rings need nothing (with three or more ranks one
  // rank may be aligned while others are not): the ranks' collective numbering stays the same, and
  // the caller's stream is ordered after every host copy issued so far.
  if (!shared_->host_copy) return;
  HostCopyTransport* host_copy = shared_->host_copy.get();
  launch("host-copy ring alignment", {},
         host_copy_call("ring alignment", [host_copy](cudaStream_t stream) { host_copy->align_rings(stream); }))
      ->wait();
}

// An issue that throws halfway leaves this rank's rings out of step with the peers': the group
// fails (and releases the waits already issued).
ProcessGroupNccl::NcclCall ProcessGroupNccl::host_copy_call(const std::string& what,
                                                            std::function<void(cudaStream_t)> issue) {
  Shared* shared = shared_.get();
  return [shared, what, issue = std::move(issue)](ncclComm_t, cudaStream_t stream) {
    try {
      issue(stream);
    } catch (const Error& e) {
      shared->fail(Error(detail::concat("the host-copy ", what, " could not be issued: ", e.what()), e.kind()));
    }
    return ncclSuccess;
  };
}

void ProcessGroupNccl::finish_enqueue() {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  shared_->check(timeout_);
  shared_->finish_pending(timeout_);
}

ProcessGroup::IssueStats ProcessGroupNccl::issue_stats() const {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  IssueStats stats = issued_;
  stats.seconds += shared_->finish_wait_seconds;  // a wait for NCCL to take a collective, wherever it happened
  return stats;
}

namespace {
ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMin: return ncclMin;
  }
  throw Error("unknown reduce op", ErrorKind::kInternal);
}
}  // namespace

std::shared_ptr<Work> ProcessGroupNccl::allreduce(const Tensor& tensor, ReduceOp op) {
  check_tensor_arg(tensor, "ProcessGroupNccl::allreduce", op != ReduceOp::kAvg);
  const ncclDataType_t dtype = nccl_dtype(tensor.dtype());
  const ncclRedOp_t reduce = nccl_op(op);
  const size_t count = static_cast<size_t>(tensor.numel());
  void* data = tensor.data_ptr();
  const std::string what = detail::concat("allreduce(", tensor.description(), ", ", reduce_op_name(op), ")");
  // The host copy sums and averages; a minimum (an integer consensus) stays NCCL's.
  if (shared_->host_copy && op != ReduceOp::kMin && HostCopyTransport::supports(tensor.dtype())) {
    HostCopyTransport* host_copy = shared_->host_copy.get();
    const DType dtype_of = tensor.dtype();
    // Note [Back-to-back host copies]: after only host copies on the comm stream, the copies
    // need only the caller's handshake event (ready_, recorded in launch() before this runs).
    return launch(
        what + " via host copy", {tensor}, host_copy_call(what, [=](cudaStream_t stream) {
          const cudaEvent_t inputs_ready = nccl_since_host_copy_ || !host_copy_overlap_ ? nullptr : ready_.get();
          host_copy->allreduce(data, static_cast<int64_t>(count), dtype_of, op, stream, inputs_ready);
          nccl_since_host_copy_ = false;
        }),
        /*via_host_copy=*/true);
  }
  return launch(what, {tensor}, [=](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllReduce(data, data, count, dtype, reduce, comm, stream);
  });
}

std::shared_ptr<Work> ProcessGroupNccl::broadcast(const Tensor& tensor, int root) {
  check_tensor_arg(tensor, "ProcessGroupNccl::broadcast", true);
  VITDDP_CHECK(root >= 0 && root < size(), "ProcessGroupNccl::broadcast: root ", root, " is outside [0, ", size(),
               ")");
  const ncclDataType_t dtype = nccl_dtype(tensor.dtype());
  const size_t count = static_cast<size_t>(tensor.numel());
  void* data = tensor.data_ptr();
  const std::string what = detail::concat("broadcast(", tensor.description(), ", root ", root, ")");
  return launch(what, {tensor}, [=](ncclComm_t comm, cudaStream_t stream) {
    return ncclBroadcast(data, data, count, dtype, root, comm, stream);
  });
}

std::shared_ptr<Work> ProcessGroupNccl::allgather(const Tensor& in, const Tensor& out) {
  const char* op = "ProcessGroupNccl::allgather";
  check_tensor_arg(in, op, true);
  check_tensor_arg(out, op, true);
  Shape expected = in.shape();
  expected.insert(expected.begin(), size());
  VITDDP_CHECK(out.dtype() == in.dtype() && out.shape() == expected, op, ": out must be ", dtype_name(in.dtype()),
               " of shape (world=", size(), ", *in.shape()) for in ", in.description(), ", got ",
               out.description());
  const ncclDataType_t dtype = nccl_dtype(in.dtype());
  const size_t count = static_cast<size_t>(in.numel());
  const void* send = in.data_ptr();
  void* recv = out.data_ptr();
  const std::string what = detail::concat("allgather(", in.description(), ")");
  return launch(what, {in, out}, [=](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllGather(send, recv, count, dtype, comm, stream);
  });
}

std::shared_ptr<Work> ProcessGroupNccl::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  const char* name = "ProcessGroupNccl::reduce_scatter";
  check_tensor_arg(in, name, op != ReduceOp::kAvg);
  check_tensor_arg(out, name, op != ReduceOp::kAvg);
  VITDDP_CHECK(out.dtype() == in.dtype() && out.numel() * size() == in.numel(), name, ": out must be ",
               dtype_name(in.dtype()), " with in.numel() / world (", size(), ") elements for in ", in.description(),
               ", got ", out.description());
  // NCCL's in place is exactly this rank's part of `in`; any other overlap is undefined there.
  const auto* in_begin = static_cast<const char*>(in.data_ptr());
  const auto* out_begin = static_cast<const char*>(out.data_ptr());
  const bool in_place = out_begin == in_begin + rank() * out.nbytes();
  const bool apart = out_begin + out.nbytes() <= in_begin || in_begin + in.nbytes() <= out_begin;
  VITDDP_CHECK(in_place || apart, name, ": out must be this rank's part of in (in place) or lie apart from it");
  const ncclDataType_t dtype = nccl_dtype(in.dtype());
  const ncclRedOp_t reduce = nccl_op(op);
  const size_t count = static_cast<size_t>(out.numel());
  const void* send = in.data_ptr();
  void* recv = out.data_ptr();
  const std::string what = detail::concat("reduce_scatter(", in.description(), ", ", reduce_op_name(op), ")");
  return launch(what, {in, out}, [=](ncclComm_t comm, cudaStream_t stream) {
    return ncclReduceScatter(send, recv, count, dtype, reduce, comm, stream);
  });
}

void ProcessGroupNccl::barrier() {
  VITDDP_CHECK(cuda::current_device() == device_, "ProcessGroupNccl::barrier: cuda:", cuda::current_device(),
               " is current, but the group lives on cuda:", device_);
  allreduce(barrier_buffer_, ReduceOp::kSum)->wait_on_host();
}

}  // namespace vitddp
