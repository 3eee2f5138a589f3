// LaunchWindow: how far the host may run ahead of the GPU, in ops (train --launch-window). See
// Note [Launch window] in the .cpp. Off (0) by default.
#pragma once

#include <atomic>

namespace vitddp::cuda {

// Ops (OpScope brackets) the calling thread may have queued on the GPU beyond the oldest one
// not yet finished; 0 turns the window off. Rounded up to a multiple of kLaunchWindowStride.
void set_launch_window(int ops);
int launch_window();

constexpr int kLaunchWindowStride = 8;  // ops between two progress marks

namespace detail {
extern std::atomic<int> g_launch_window_ops;
void launch_window_after_op() noexcept;
}  // namespace detail

// Called at the end of every op (OpScope). Off: one relaxed load.
inline void launch_window_after_op() {
  if (detail::g_launch_window_ops.load(std::memory_order_relaxed) > 0) detail::launch_window_after_op();
}

}  // namespace vitddp::cuda
