// TraceRecorder, the step analysis and the Chrome trace writer. See train/observe/trace.h.
#include "train/observe/trace.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "framework/core/error.h"
#include "framework/core/nvtx.h"

namespace vitddp {

const char* to_string(GpuStream stream) { return stream == GpuStream::kCompute ? "compute" : "comm"; }

bool is_step_range_name(const std::string& name) { return name == "step" || name.rfind("step ", 0) == 0; }

// --- interval arithmetic ---------------------------------------------------------------------

namespace {

// Sorted, disjoint, non-empty intervals covering the same time as the input.
std::vector<Interval> merged(std::vector<Interval> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](const Interval& i) { return !(i.end_us > i.start_us); }), v.end());
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.start_us < b.start_us; });
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (!out.empty() && i.start_us <= out.back().end_us)
      out.back().end_us = std::max(out.back().end_us, i.end_us);
    else
      out.push_back(i);
  }
  return out;
}

}  // namespace

double union_length_us(std::vector<Interval> intervals) {
  double total = 0;
  for (const Interval& i : merged(std::move(intervals))) total += i.end_us - i.start_us;
  return total;
}

// Note [Exposed communication]
// Communication is exposed when the comm stream is busy and the compute stream is not: nothing
// hides it, so the step waits for it. With both sets merged into sorted disjoint intervals, a
// sweep subtracts each comm interval's overlap with the compute intervals. Because the result
// is a subset of the comm union, 0 <= exposed <= comm always, whatever the inputs (nested or
// overlapping compute ranges included), which the trace tests check.
double uncovered_length_us(std::vector<Interval> intervals, std::vector<Interval> cover) {
  std::vector<Interval> busy = merged(std::move(intervals));
  std::vector<Interval> hidden = merged(std::move(cover));
  double total = 0;
  size_t c = 0;
  for (const Interval& b : busy) {
    double covered = 0;
    while (c < hidden.size() && hidden[c].end_us <= b.start_us) ++c;
    for (size_t k = c; k < hidden.size() && hidden[k].start_us < b.end_us; ++k)
      covered += std::min(b.end_us, hidden[k].end_us) - std::max(b.start_us, hidden[k].start_us);
    total += (b.end_us - b.start_us) - covered;
  }
  return std::max(0.0, total);
}

// --- analysis --------------------------------------------------------------------------------

StepStats analyze_step(const StepTimeline& t) {
  StepStats s;
  s.rank = t.rank;
  s.step = t.step;

  std::vector<Interval> compute, comm, forward, backward;
  const GpuInterval* gpu_step = nullptr;
  for (const GpuInterval& g : t.gpu) {
    Interval i{g.start_us, g.end_us};
    if (g.stream == GpuStream::kComm) {
      comm.push_back(i);
      continue;
    }
    if (is_step_range_name(g.name)) {  // spans the step, waits included: not compute work
      gpu_step = &g;
      continue;
    }
    compute.push_back(i);
    if (g.name == kTraceForward) forward.push_back(i);
    if (g.name == kTraceBackward) backward.push_back(i);
  }
  for (const BucketRecord& b : t.buckets) comm.push_back({b.start_us, b.end_us});

  s.forward_us = union_length_us(forward);
  s.backward_us = union_length_us(backward);
  s.compute_us = union_length_us(compute);
  s.comm_us = union_length_us(comm);
  s.exposed_comm_us = std::min(s.comm_us, uncovered_length_us(comm, compute));  // See Note [Exposed communication]
  s.overlap_pct = s.comm_us > 0 ? 100.0 * (1.0 - s.exposed_comm_us / s.comm_us) : 100.0;

  // Step time: the compute stream's "step" interval if there is one (the device's time), else
  // the "step" CPU range, else the span of everything in the step.
  const CpuRange* step_range = nullptr;
  for (const CpuRange& r : t.cpu)
    if (is_step_range_name(r.name)) step_range = &r;
  if (gpu_step) {
    s.start_us = gpu_step->start_us;
    s.step_us = std::max(0.0, gpu_step->end_us - gpu_step->start_us);
  } else if (step_range) {
    s.start_us = step_range->start_us;
    s.step_us = std::max(0.0, step_range->end_us - step_range->start_us);
  } else {
    double lo = 0, hi = 0;
    bool any = false;
    auto extend = [&](double a, double b) {
      lo = any ? std::min(lo, a) : a;
      hi = any ? std::max(hi, b) : b;
      any = true;
    };
    for (const CpuRange& r : t.cpu) extend(r.start_us, r.end_us);
    for (const GpuInterval& g : t.gpu) extend(g.start_us, g.end_us);
    for (const BucketRecord& b : t.buckets) extend(std::min(b.ready_us, b.start_us), b.end_us);
    s.start_us = lo;
    s.step_us = std::max(0.0, hi - lo);
  }

  for (const BucketRecord& b : t.buckets) {
    BucketStats bs;
    bs.index = b.index;
    bs.bytes = b.bytes;
    bs.ready_us = b.ready_us;
    bs.start_us = b.start_us;
    bs.end_us = b.end_us;
    bs.comm_us = std::max(0.0, b.end_us - b.start_us);
    bs.waited_us = std::max(0.0, b.start_us - b.ready_us);
    bs.bandwidth_gbps = bs.comm_us > 0 ? static_cast<double>(b.bytes) / (bs.comm_us * 1e3) : 0.0;
    s.buckets.push_back(bs);
  }
  std::sort(s.buckets.begin(), s.buckets.end(),
            [](const BucketStats& a, const BucketStats& b) { return a.index < b.index; });
  return s;
}

RunStats analyze_run(const std::vector<StepTimeline>& timelines) {
  RunStats run;
  std::map<int, RankStats> ranks;
  std::map<int, double> exposed_sum;
  for (const StepTimeline& t : timelines) {
    StepStats s = analyze_step(t);
    RankStats& r = ranks[s.rank];
    r.rank = s.rank;
    r.steps += 1;
    r.mean_step_us += s.step_us;
    r.max_step_us = std::max(r.max_step_us, s.step_us);
    exposed_sum[s.rank] += s.exposed_comm_us;
    run.steps.push_back(std::move(s));
  }
  std::sort(run.steps.begin(), run.steps.end(), [](const StepStats& a, const StepStats& b) {
    return std::tie(a.rank, a.step) < std::tie(b.rank, b.step);
  });
  double slowest = -1;
  for (auto& [rank, r] : ranks) {
    r.mean_step_us /= static_cast<double>(r.steps);
    r.mean_exposed_comm_us = exposed_sum[rank] / static_cast<double>(r.steps);
    if (r.mean_step_us > slowest) {
      slowest = r.mean_step_us;
      run.slowest_rank = rank;
    }
    run.ranks.push_back(r);
  }
  return run;
}

// --- the recorder ----------------------------------------------------------------------------

void check_trace_path(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  const std::string what = flag + " " + path + ": ";
  VITDDP_CHECK(!path.empty(), flag, " needs a file name");
  std::error_code ec;
  VITDDP_CHECK(!fs::is_directory(path, ec), what, "is a folder; give a file name such as ",
               (fs::path(path) / "trace.json").string());
  fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) parent = ".";
  VITDDP_CHECK(fs::exists(parent, ec), what, "folder ", parent.string(), " does not exist");
  VITDDP_CHECK(fs::is_directory(parent, ec), what, parent.string(), " is not a folder");
  // Opening is the only check that holds for every case (permissions, read-only mounts, root).
  bool existed = fs::exists(path, ec);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  VITDDP_CHECK(fd >= 0, what, "cannot write there (", std::strerror(errno), ")");
  ::close(fd);
  if (!existed) fs::remove(path, ec);
}

TraceRecorder TraceRecorder::open(const std::string& path) {
  check_trace_path(path);
  TraceRecorder r;
  r.path_ = path;
  return r;
}

void TraceRecorder::add(CpuRange range) { cpu_.push_back(std::move(range)); }
void TraceRecorder::add(GpuInterval interval) { gpu_.push_back(std::move(interval)); }
void TraceRecorder::add(BucketRecord bucket) { buckets_.push_back(bucket); }

void TraceRecorder::merge(const TraceRecorder& other) {
  cpu_.insert(cpu_.end(), other.cpu_.begin(), other.cpu_.end());
  gpu_.insert(gpu_.end(), other.gpu_.begin(), other.gpu_.end());
  buckets_.insert(buckets_.end(), other.buckets_.begin(), other.buckets_.end());
}

nlohmann::json TraceRecorder::to_json() const {
  nlohmann::json cpu = nlohmann::json::array(), gpu = nlohmann::json::array(), buckets = nlohmann::json::array();
  for (const CpuRange& r : cpu_)
    cpu.push_back({{"name", r.name}, {"rank", r.rank}, {"step", r.step}, {"thread", r.thread},
                   {"start_us", r.start_us}, {"end_us", r.end_us}});
  for (const GpuInterval& g : gpu_)
    gpu.push_back({{"name", g.name}, {"rank", g.rank}, {"step", g.step}, {"stream", to_string(g.stream)},
                   {"start_us", g.start_us}, {"end_us", g.end_us}});
  for (const BucketRecord& b : buckets_)
    buckets.push_back({{"rank", b.rank}, {"step", b.step}, {"index", b.index}, {"bytes", b.bytes},
                       {"ready_us", b.ready_us}, {"start_us", b.start_us}, {"end_us", b.end_us}});
  return {{"cpu", cpu}, {"gpu", gpu}, {"buckets", buckets}};
}

TraceRecorder TraceRecorder::from_json(const nlohmann::json& events) {
  TraceRecorder r;
  try {
    for (const auto& e : events.at("cpu"))
      r.add(CpuRange{e.at("name").get<std::string>(), e.at("rank").get<int>(), e.at("step").get<int64_t>(),
                     e.at("thread").get<int>(), e.at("start_us").get<double>(), e.at("end_us").get<double>()});
    for (const auto& e : events.at("gpu")) {
      std::string stream = e.at("stream").get<std::string>();
      VITDDP_CHECK(stream == "compute" || stream == "comm", "trace events: unknown stream \"", stream, "\"");
      r.add(GpuInterval{e.at("name").get<std::string>(), e.at("rank").get<int>(), e.at("step").get<int64_t>(),
                        stream == "comm" ? GpuStream::kComm : GpuStream::kCompute, e.at("start_us").get<double>(),
                        e.at("end_us").get<double>()});
    }
    for (const auto& e : events.at("buckets"))
      r.add(BucketRecord{e.at("rank").get<int>(), e.at("step").get<int64_t>(), e.at("index").get<int>(),
                         e.at("bytes").get<int64_t>(), e.at("ready_us").get<double>(), e.at("start_us").get<double>(),
                         e.at("end_us").get<double>()});
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("trace events: malformed: ") + e.what());
  }
  return r;
}

std::vector<StepTimeline> TraceRecorder::timelines() const {
  std::map<std::pair<int, int64_t>, StepTimeline> by_step;
  auto at = [&](int rank, int64_t step) -> StepTimeline& {
    StepTimeline& t = by_step[{rank, step}];
    t.rank = rank;
    t.step = step;
    return t;
  };
  for (const CpuRange& r : cpu_)
    if (r.step >= 0) at(r.rank, r.step).cpu.push_back(r);
  for (const GpuInterval& g : gpu_)
    if (g.step >= 0) at(g.rank, g.step).gpu.push_back(g);
  for (const BucketRecord& b : buckets_)
    if (b.step >= 0) at(b.rank, b.step).buckets.push_back(b);
  std::vector<StepTimeline> out;
  for (auto& [key, t] : by_step) out.push_back(std::move(t));
  return out;
}

double trace_clock_us() {
  using namespace std::chrono;
  return static_cast<double>(duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count()) / 1e3;
}

TracedRange::TracedRange(TraceRecorder* recorder, const std::string& name, NvtxColor color, int rank, int64_t step,
                         int thread)
    : nvtx_(name, color), recorder_(recorder) {
  if (recorder_) range_ = CpuRange{name, rank, step, thread, trace_clock_us(), 0};
}

TracedRange::TracedRange(TracedRange&& other) noexcept
    : nvtx_(std::move(other.nvtx_)), recorder_(other.recorder_), range_(std::move(other.range_)) {
  other.recorder_ = nullptr;
}

void TracedRange::end() noexcept {
  nvtx_.end();
  if (!recorder_) return;
  range_.end_us = trace_clock_us();
  try {
    recorder_->add(std::move(range_));
  } catch (...) {  // out of memory while tracing: lose the range, not the run
  }
  recorder_ = nullptr;
}

// --- Chrome trace ----------------------------------------------------------------------------

namespace {

// Track ids within a rank's process: CPU threads use their own number; the GPU streams and the
// per-step analysis sit after them.
constexpr int kTidCompute = 1000;
constexpr int kTidComm = 1001;
constexpr int kTidSteps = 1002;

int tid_of(GpuStream stream) { return stream == GpuStream::kCompute ? kTidCompute : kTidComm; }

nlohmann::json metadata(const char* what, int pid, int tid, const std::string& name) {
  return {{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

nlohmann::json sort_index(const char* what, int pid, int tid, int index) {
  return {{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"sort_index", index}}}};
}

nlohmann::json complete(const std::string& name, const char* cat, int pid, int tid, double ts, double dur,
                        nlohmann::json args) {
  return {{"name", name}, {"cat", cat},  {"ph", "X"},          {"pid", pid},
          {"tid", tid},   {"ts", ts},    {"dur", std::max(0.0, dur)}, {"args", std::move(args)}};
}

double ms(double us) { return us / 1e3; }

nlohmann::json step_json(const StepStats& s) {
  nlohmann::json buckets = nlohmann::json::array();
  for (const BucketStats& b : s.buckets)
    buckets.push_back({{"index", b.index},
                       {"bytes", b.bytes},
                       {"ready_ms", ms(b.ready_us - s.start_us)},  // from the start of the step
                       {"start_ms", ms(b.start_us - s.start_us)},
                       {"end_ms", ms(b.end_us - s.start_us)},
                       {"comm_ms", ms(b.comm_us)},
                       {"waited_behind_earlier_ms", ms(b.waited_us)},
                       {"bandwidth_GBps", b.bandwidth_gbps}});
  return {{"rank", s.rank},
          {"step", s.step},
          {"step_ms", ms(s.step_us)},
          {"forward_ms", ms(s.forward_us)},
          {"backward_ms", ms(s.backward_us)},
          {"compute_ms", ms(s.compute_us)},
          {"comm_ms", ms(s.comm_us)},
          {"exposed_comm_ms", ms(s.exposed_comm_us)},
          {"overlap_pct", s.overlap_pct},
          {"buckets", buckets}};
}

}  // namespace

nlohmann::json TraceRecorder::chrome_trace() const {
  // Timestamps start at the earliest event, so the viewer opens at 0.
  double origin = 0;
  bool any = false;
  auto see = [&](double t) {
    origin = any ? std::min(origin, t) : t;
    any = true;
  };
  for (const CpuRange& r : cpu_) see(r.start_us);
  for (const GpuInterval& g : gpu_) see(g.start_us);
  for (const BucketRecord& b : buckets_) see(std::min(b.ready_us, b.start_us));

  nlohmann::json events = nlohmann::json::array();

  // Name each rank's process and tracks.
  std::set<int> ranks;
  std::set<std::pair<int, int>> threads;
  for (const CpuRange& r : cpu_) {
    ranks.insert(r.rank);
    threads.insert({r.rank, r.thread});
  }
  for (const GpuInterval& g : gpu_) ranks.insert(g.rank);
  for (const BucketRecord& b : buckets_) ranks.insert(b.rank);
  for (int rank : ranks) {
    events.push_back(metadata("process_name", rank, 0, "rank " + std::to_string(rank)));
    events.push_back(sort_index("process_sort_index", rank, 0, rank));
    events.push_back(metadata("thread_name", rank, kTidSteps, "steps (analysis)"));
    events.push_back(metadata("thread_name", rank, kTidCompute, "GPU compute stream"));
    events.push_back(metadata("thread_name", rank, kTidComm, "GPU comm stream"));
    events.push_back(sort_index("thread_sort_index", rank, kTidSteps, -1));
    events.push_back(sort_index("thread_sort_index", rank, kTidCompute, kTidCompute));
    events.push_back(sort_index("thread_sort_index", rank, kTidComm, kTidComm));
  }
  for (auto [rank, thread] : threads)
    events.push_back(metadata("thread_name", rank, thread, thread == 0 ? "CPU main" : "CPU thread " + std::to_string(thread)));

  for (const CpuRange& r : cpu_)
    events.push_back(complete(r.name, "cpu", r.rank, r.thread, r.start_us - origin, r.end_us - r.start_us,
                              {{"step", r.step}}));
  for (const GpuInterval& g : gpu_)
    events.push_back(complete(g.name, "gpu", g.rank, tid_of(g.stream), g.start_us - origin, g.end_us - g.start_us,
                              {{"step", g.step}, {"stream", to_string(g.stream)}}));
  for (const BucketRecord& b : buckets_) {
    double comm_us = std::max(0.0, b.end_us - b.start_us);
    nlohmann::json args = {{"step", b.step},
                           {"bucket", b.index},
                           {"bytes", b.bytes},
                           {"bandwidth_GBps", comm_us > 0 ? static_cast<double>(b.bytes) / (comm_us * 1e3) : 0.0},
                           {"ready_ts", b.ready_us - origin},
                           {"waited_behind_earlier_us", std::max(0.0, b.start_us - b.ready_us)}};
    events.push_back(complete(nvtx_allreduce_name(b.index, b.bytes), "comm", b.rank, kTidComm, b.start_us - origin,
                              comm_us, std::move(args)));
    events.push_back({{"name", "b" + std::to_string(b.index) + " ready"},
                      {"cat", "comm"},
                      {"ph", "i"},
                      {"s", "t"},
                      {"pid", b.rank},
                      {"tid", kTidComm},
                      {"ts", b.ready_us - origin},
                      {"args", {{"step", b.step}, {"bucket", b.index}}}});
  }

  RunStats run = analyze();
  nlohmann::json steps = nlohmann::json::array();
  for (const StepStats& s : run.steps) {
    nlohmann::json summary = step_json(s);
    summary.erase("buckets");
    events.push_back(complete("step " + std::to_string(s.step), "analysis", s.rank, kTidSteps, s.start_us - origin,
                              s.step_us, summary));
    events.push_back({{"name", "exposed comm (ms)"},
                      {"ph", "C"},
                      {"pid", s.rank},
                      {"ts", s.start_us - origin},
                      {"args", {{"exposed", ms(s.exposed_comm_us)}, {"comm", ms(s.comm_us)}}}});
    steps.push_back(step_json(s));
  }
  nlohmann::json rank_stats = nlohmann::json::array();
  for (const RankStats& r : run.ranks)
    rank_stats.push_back({{"rank", r.rank},
                          {"steps", r.steps},
                          {"mean_step_ms", ms(r.mean_step_us)},
                          {"max_step_ms", ms(r.max_step_us)},
                          {"mean_exposed_comm_ms", ms(r.mean_exposed_comm_us)}});

  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"vitddp", {{"steps", steps}, {"ranks", rank_stats}, {"slowest_rank", run.slowest_rank}}}};
}

void TraceRecorder::write_chrome_trace(const std::string& path) const {
  nlohmann::json doc = chrome_trace();
  std::ofstream out(path);
  VITDDP_CHECK(out.good(), "--trace ", path, ": cannot write there (", std::strerror(errno), ")");
  out << doc.dump() << '\n';
  out.close();
  VITDDP_CHECK(!out.fail(), "--trace ", path, ": writing failed (disk full?)");
}

void TraceRecorder::write_chrome_trace() const {
  VITDDP_ASSERT(!path_.empty(), "write_chrome_trace() without a path: use TraceRecorder::open(path)");
  write_chrome_trace(path_);
}

}  // namespace vitddp
