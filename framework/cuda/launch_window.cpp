#include "framework/cuda/launch_window.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>
#include <vector>

#include "framework/core/error.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {

// Note [Launch window]
// A thread that queues GPU work faster than the GPU runs it ends up inside cuLaunchKernel,
// which waits for room in the hardware queue while holding the CUDA driver's lock; other
// threads' CUDA calls (NCCL's proxy thread, our watchdog) wait for that lock meanwhile. The
// window keeps the host outside the driver instead: every kLaunchWindowStride ops an event is
// recorded on the current stream, and before the next one the thread waits, polling
// cudaEventQuery (which lets go of the lock between polls), until the event of `limit` ops ago
// has fired. Each thread that issues ops has its own marks.
//
// Built against the stalls of NCCL's copy-engine shared-memory transport
// (NCCL_SHM_USE_CUDA_MEMCPY=1), it did not cure them (docs/performance.md, "Copy engines for
// the shared-memory transport"), so it stays off by default, a dead end kept as a flag.
namespace detail {
std::atomic<int> g_launch_window_ops{0};

namespace {
struct Marks {
  std::vector<Event> events;  // a ring, one per kLaunchWindowStride ops
  std::vector<bool> recorded;
  size_t next = 0;
  long ops = 0;
};
thread_local Marks t_marks;

// Records a mark every kLaunchWindowStride ops, first waiting for the one `limit` ops back.
void wait_for_window(int limit) {
  Marks& marks = t_marks;
  if (++marks.ops % kLaunchWindowStride != 0) return;
  const size_t slots = static_cast<size_t>(std::max(1, limit / kLaunchWindowStride));
  if (marks.events.size() != slots) {  // first use on this thread, or a new limit
    marks.events.clear();
    for (size_t i = 0; i < slots; ++i) marks.events.push_back(Event::create());
    marks.recorded.assign(slots, false);
    marks.next = 0;
  }
  Event& oldest = marks.events[marks.next];
  if (marks.recorded[marks.next]) {
    while (!oldest.query()) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  oldest.record(current_stream());
  marks.recorded[marks.next] = true;
  marks.next = (marks.next + 1) % slots;
}
}  // namespace

void launch_window_after_op() noexcept {
  const int limit = g_launch_window_ops.load(std::memory_order_relaxed);
  if (limit <= 0) return;  // turned off since the caller looked
  try {
    wait_for_window(limit);
  } catch (const std::exception& e) {
    // Called from OpScope's destructor: never throw. A broken window turns itself off; the
    // CUDA error that broke it surfaces at the next checked call.
    g_launch_window_ops.store(0);
    std::fprintf(stderr, "vitddp: warning: launch window turned off: %s\n", e.what());
  }
}

}  // namespace detail

void set_launch_window(int ops) {
  VITDDP_CHECK(ops >= 0, "the launch window must be >= 0 ops, got ", ops);
  const int rounded = (ops + kLaunchWindowStride - 1) / kLaunchWindowStride * kLaunchWindowStride;
  detail::g_launch_window_ops.store(rounded);
}

int launch_window() { return detail::g_launch_window_ops.load(); }

}  // namespace vitddp::cuda
