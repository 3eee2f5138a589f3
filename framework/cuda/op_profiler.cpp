#include "framework/cuda/op_profiler.h"

#include <algorithm>
#include <map>

#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {

struct OpProfiler::Impl {
  struct Record {
    const char* name;
    Event start, stop;
  };
  std::vector<Record> records;
  std::vector<size_t> open;  // indices of begun, not yet ended records (nesting allowed)
};

OpProfiler& OpProfiler::instance() {
  static OpProfiler profiler;
  return profiler;
}

void OpProfiler::set_enabled(bool enabled) {
  if (!impl_) impl_ = new Impl();  // lives for the process, like the profiler itself
  enabled_ = enabled;
}

void OpProfiler::begin(const char* name) {
  Impl::Record r{name, Event::create(true), Event::create(true)};
  r.start.record(current_stream());
  impl_->records.push_back(std::move(r));
  impl_->open.push_back(impl_->records.size() - 1);
}

void OpProfiler::end() {
  if (impl_->open.empty()) return;
  impl_->records[impl_->open.back()].stop.record(current_stream());
  impl_->open.pop_back();
}

std::vector<OpProfiler::Entry> OpProfiler::collect() {
  std::map<std::string, Entry> by_name;
  if (impl_) {
    for (auto& r : impl_->records) {
      r.stop.synchronize();
      Entry& e = by_name[r.name];
      e.name = r.name;
      e.ms += r.stop.elapsed_ms_since(r.start);
      e.calls += 1;
    }
    impl_->records.clear();
    impl_->open.clear();
  }
  std::vector<Entry> out;
  for (auto& [name, e] : by_name) out.push_back(e);
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.ms > b.ms; });
  return out;
}

}  // namespace vitddp::cuda
