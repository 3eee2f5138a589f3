#include "distributed/heartbeat_monitor.h"

#include <utility>

#include "framework/core/error.h"

namespace vitddp {

// Note [Heartbeat monitor]
// The NCCL watchdog turns a late collective into an error, but to look it takes the group's
// lock and makes CUDA calls. A thread stuck inside a CUDA or NCCL call while it holds that lock
// (seen with NCCL's copy-engine shared-memory transport: docs/performance.md, "Copy engines for
// the shared-memory transport") stops the watchdog too, and the run would hang with nobody left
// to say so. The monitor takes no lock of the group and makes no CUDA call: the watchdog beats
// after every check, and when the beats stop for longer than anything legitimate can hold the
// watchdog, the monitor reports (PyTorch's ProcessGroupNCCL has the same heartbeat monitor,
// TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC). The reaction (print the stacks, exit) belongs to the owner.
HeartbeatMonitor::HeartbeatMonitor(std::chrono::milliseconds limit,
                                   std::function<void(const std::string& report)> on_stall,
                                   std::chrono::milliseconds period)
    : limit_(limit), period_(period), on_stall_(std::move(on_stall)), last_beat_(Clock::now()) {
  VITDDP_CHECK(limit.count() > 0 && period.count() > 0, "HeartbeatMonitor: limit and period must be positive");
  thread_ = std::thread([this] { run(); });
}

HeartbeatMonitor::~HeartbeatMonitor() {
  stop();
  if (thread_.joinable()) thread_.join();
}

void HeartbeatMonitor::beat(std::string note) {
  std::lock_guard<std::mutex> lock(mutex_);
  last_beat_ = Clock::now();
  note_ = std::move(note);
}

void HeartbeatMonitor::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
  }
  wake_.notify_all();
}

void HeartbeatMonitor::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period_, [&] { return stopped_; })) {
    const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_beat_);
    if (silent < limit_) continue;
    const std::string report = detail::concat("no heartbeat for ", silent.count(), " ms (limit ", limit_.count(),
                                              " ms); last seen: ", note_.empty() ? "nothing yet" : note_);
    stopped_ = true;
    lock.unlock();
    on_stall_(report);
    return;
  }
}

}  // namespace vitddp
