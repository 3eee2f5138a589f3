// OpProfiler: GPU time per op type, for a kernel-level breakdown of a step. When enabled, each
// op's CUDA work (and the framework's own copies, gradient accumulation, optimizer) is
// bracketed by CUDA events on the current stream; collect() waits for them and sums by name.
// Disabled, it costs one branch per op.
#pragma once

#include <string>
#include <utility>
#include <vector>


namespace vitddp::cuda {

class OpProfiler {
 public:
  static OpProfiler& instance();
  void set_enabled(bool enabled);
  bool enabled() const { return enabled_; }
  void begin(const char* name);
  void end();
  // (name, milliseconds, calls), largest first; clears what was recorded.
  struct Entry {
    std::string name;
    double ms = 0;
    int calls = 0;
  };
  std::vector<Entry> collect();

 private:
  OpProfiler() = default;
  bool enabled_ = false;
  struct Impl;
  Impl* impl_ = nullptr;
};

// Brackets a scope when the profiler is on.
class OpScope {
 public:
  explicit OpScope(const char* name) : active_(OpProfiler::instance().enabled()) {
    if (active_) OpProfiler::instance().begin(name);
  }
  ~OpScope() {
    if (active_) OpProfiler::instance().end();
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  bool active_;
};

}  // namespace vitddp::cuda
