// HeartbeatMonitor: silent while beats come, reports once (with the last note) when they stop,
// and never after stop().
#include "distributed/heartbeat_monitor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "framework/core/error.h"

namespace vitddp {
namespace {

using std::chrono::milliseconds;

struct Reports {
  std::mutex mutex;
  int count = 0;
  std::string last;
  std::chrono::steady_clock::time_point at;
  auto callback() {
    return [this](const std::string& report) {
      std::lock_guard<std::mutex> lock(mutex);
      ++count;
      last = report;
      at = std::chrono::steady_clock::now();
    };
  }
  int seen() {
    std::lock_guard<std::mutex> lock(mutex);
    return count;
  }
};

TEST(HeartbeatMonitor, StaysSilentWhileBeatsCome) {
  Reports reports;
  // A limit far above the beats' spacing, so that a loaded 2-core machine cannot fake a stall.
  HeartbeatMonitor monitor(milliseconds(1000), reports.callback(), milliseconds(10));
  const auto end = std::chrono::steady_clock::now() + milliseconds(1500);
  while (std::chrono::steady_clock::now() < end) {
    monitor.beat("busy");
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(reports.seen(), 0);
}

TEST(HeartbeatMonitor, ReportsOnceWithTheLastNoteWhenBeatsStop) {
  Reports reports;
  HeartbeatMonitor monitor(milliseconds(100), reports.callback(), milliseconds(5));
  monitor.beat("first");
  const auto last_beat = std::chrono::steady_clock::now();  // before the beat: the report comes >= 100 ms after it
  monitor.beat("NCCL broadcast #1 in flight for 12 ms");
  const auto deadline = last_beat + milliseconds(5000);
  while (reports.seen() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(5));
  std::this_thread::sleep_for(milliseconds(200));  // time for a wrong second report
  std::lock_guard<std::mutex> lock(reports.mutex);
  ASSERT_EQ(reports.count, 1);
  EXPECT_GE(reports.at - last_beat, milliseconds(100));  // not before the limit
  EXPECT_NE(reports.last.find("no heartbeat for "), std::string::npos) << reports.last;
  EXPECT_NE(reports.last.find("limit 100 ms"), std::string::npos) << reports.last;
  EXPECT_NE(reports.last.find("last seen: NCCL broadcast #1 in flight for 12 ms"), std::string::npos) << reports.last;
}

TEST(HeartbeatMonitor, ReportsWhenNoBeatEverCame) {
  Reports reports;
  HeartbeatMonitor monitor(milliseconds(200), reports.callback(), milliseconds(5));
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
  while (reports.seen() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(5));
  std::lock_guard<std::mutex> lock(reports.mutex);
  ASSERT_EQ(reports.count, 1);
  EXPECT_NE(reports.last.find("last seen: nothing yet"), std::string::npos) << reports.last;
}

TEST(HeartbeatMonitor, StopEndsTheWatch) {
  Reports reports;
  HeartbeatMonitor monitor(milliseconds(200), reports.callback(), milliseconds(5));
  monitor.beat("done");
  monitor.stop();
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_EQ(reports.seen(), 0);
}

TEST(HeartbeatMonitor, RejectsANonPositiveLimit) {
  Reports reports;
  EXPECT_THROW(HeartbeatMonitor(milliseconds(0), reports.callback()), Error);
}

}  // namespace
}  // namespace vitddp
