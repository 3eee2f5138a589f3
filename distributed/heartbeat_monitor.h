// HeartbeatMonitor: the watchdog's own watchdog. See Note [Heartbeat monitor] in the .cpp.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace vitddp {

class HeartbeatMonitor {
 public:
  // Calls on_stall (once, on the monitor's thread) when no beat() has come for `limit`, with a
  // line naming the silence and the last beat's note. The first beat is counted from now.
  HeartbeatMonitor(std::chrono::milliseconds limit, std::function<void(const std::string& report)> on_stall,
                   std::chrono::milliseconds period = std::chrono::milliseconds(500));
  ~HeartbeatMonitor();  // stops and joins the monitor's thread
  HeartbeatMonitor(const HeartbeatMonitor&) = delete;
  HeartbeatMonitor& operator=(const HeartbeatMonitor&) = delete;

  // The watched thread is alive; `note` says what it last saw (named in the report).
  void beat(std::string note);
  // The watched thread ends on purpose: no report from now on.
  void stop();

 private:
  void run();

  using Clock = std::chrono::steady_clock;
  const std::chrono::milliseconds limit_;
  const std::chrono::milliseconds period_;
  std::function<void(const std::string&)> on_stall_;
  std::mutex mutex_;
  std::condition_variable wake_;
  Clock::time_point last_beat_;
  std::string note_;
  bool stopped_ = false;
  std::thread thread_;
};

}  // namespace vitddp
