// The built-in timeline (--trace FILE): TraceRecorder collects what happened in each step, per
// rank, as plain numbers in microseconds on one host clock, analyses it and writes a Chrome
// trace (JSON that Perfetto and chrome://tracing open).
//
//   CPU ranges     what the host did ("step 3", "get batch", "forward", ...), per thread
//   GPU intervals  what a stream did, from CUDA event pairs on the compute and comm streams
//   buckets        per bucket all-reduce: when the bucket became ready, when its communication
//                  started and ended on the comm stream, and its bytes
//
// The recorder knows nothing of CUDA: the trainer converts event times to host microseconds and
// hands them in, so all of this is tested on the CPU. The analysis (analyze_step) is pure:
// forward/backward/comm time, exposed communication (see Note [Exposed communication]), overlap,
// per-bucket wait and bandwidth, and per rank the step time, naming the slowest rank.
// Ranks record separately; to_json/from_json/merge carry one rank's events to rank 0, which
// writes the one file (pid = rank in the trace).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/core/nvtx.h"

namespace vitddp {

enum class GpuStream { kCompute, kComm };
const char* to_string(GpuStream stream);  // "compute" | "comm"

struct CpuRange {
  std::string name;
  int rank = 0;
  int64_t step = -1;  // -1: outside any step (setup); written to the trace, not analysed
  int thread = 0;     // 0: the training thread
  double start_us = 0, end_us = 0;
};

struct GpuInterval {
  std::string name;
  int rank = 0;
  int64_t step = -1;
  GpuStream stream = GpuStream::kCompute;
  double start_us = 0, end_us = 0;
};

// One bucket's communication in one step. Its [start_us, end_us] counts as comm-stream time;
// do not add it again as a GpuInterval (it would be harmless: time is a union, not a sum).
struct BucketRecord {
  int rank = 0;
  int64_t step = -1;
  int index = 0;
  int64_t bytes = 0;
  double ready_us = 0;  // the last gradient of the bucket arrived (host time)
  double start_us = 0;  // its collective began on the comm stream
  double end_us = 0;    // and ended
};

// Names the analysis looks for; see Note [Range names] in framework/core/nvtx.h.
inline constexpr const char* kTraceForward = "forward";
inline constexpr const char* kTraceBackward = "backward";
// A range or compute-stream interval named "step" or "step N" spans the step and gives its time.
bool is_step_range_name(const std::string& name);

// --- interval arithmetic ---------------------------------------------------------------------
struct Interval {
  double start_us = 0, end_us = 0;
};
// Length of the union (overlaps counted once; empty or reversed intervals count 0).
double union_length_us(std::vector<Interval> intervals);
// Length of union(intervals) minus union(cover): the time `intervals` are busy and `cover` is not.
double uncovered_length_us(std::vector<Interval> intervals, std::vector<Interval> cover);

// --- analysis --------------------------------------------------------------------------------
struct BucketStats {
  int index = 0;
  int64_t bytes = 0;
  double ready_us = 0, start_us = 0, end_us = 0;
  double comm_us = 0;            // end - start
  double waited_us = 0;          // start - ready, >= 0: time queued behind earlier buckets
  double bandwidth_gbps = 0;     // bytes / comm time, in GB/s (1e9 bytes); 0 when comm_us is 0
};

struct StepStats {
  int rank = 0;
  int64_t step = 0;
  double start_us = 0;        // where the step begins (see step_us)
  double step_us = 0;         // the compute stream's "step" interval, else the "step" CPU range,
                              // else the span of the step's events
  double forward_us = 0;      // union of compute-stream intervals named "forward"
  double backward_us = 0;     // union of compute-stream intervals named "backward"
  double compute_us = 0;      // union of the compute-stream intervals but "step"
  double comm_us = 0;         // union of comm-stream intervals and bucket communication
  double exposed_comm_us = 0;  // comm time with the compute stream idle; 0 <= exposed <= comm
  double overlap_pct = 0;      // 100 * (1 - exposed / comm); 100 when there was no comm
  std::vector<BucketStats> buckets;  // by bucket index
};

// Everything one rank recorded in one step.
struct StepTimeline {
  int rank = 0;
  int64_t step = 0;
  std::vector<CpuRange> cpu;
  std::vector<GpuInterval> gpu;
  std::vector<BucketRecord> buckets;
};

StepStats analyze_step(const StepTimeline& timeline);

struct RankStats {
  int rank = 0;
  int64_t steps = 0;
  double mean_step_us = 0;
  double max_step_us = 0;
  double mean_exposed_comm_us = 0;
};

struct RunStats {
  std::vector<StepStats> steps;  // by (rank, step)
  std::vector<RankStats> ranks;  // by rank
  int slowest_rank = -1;         // highest mean step time; -1 when nothing was analysed
};

RunStats analyze_run(const std::vector<StepTimeline>& timelines);

// --- the recorder ----------------------------------------------------------------------------
// Not thread-safe: record from the training thread (GPU times are known only after the step's
// events have completed anyway).
class TraceRecorder {
 public:
  TraceRecorder() = default;  // in memory; write with write_chrome_trace(path)
  // Checks up front that `path` can be written (see check_trace_path) and remembers it.
  static TraceRecorder open(const std::string& path);
  const std::string& path() const { return path_; }

  void add(CpuRange range);
  void add(GpuInterval interval);
  void add(BucketRecord bucket);
  // Appends another recorder's events (another rank's, gathered on rank 0).
  void merge(const TraceRecorder& other);

  const std::vector<CpuRange>& cpu_ranges() const { return cpu_; }
  const std::vector<GpuInterval>& gpu_intervals() const { return gpu_; }
  const std::vector<BucketRecord>& buckets() const { return buckets_; }

  // The raw events, to send across ranks; from_json throws vitddp::Error on a malformed document.
  nlohmann::json to_json() const;
  static TraceRecorder from_json(const nlohmann::json& events);

  // Events grouped by (rank, step), steps >= 0 only, in order.
  std::vector<StepTimeline> timelines() const;
  RunStats analyze() const { return analyze_run(timelines()); }

  // Chrome trace JSON: {"traceEvents": [...], "displayTimeUnit": "ms", "vitddp": {analysis}}.
  nlohmann::json chrome_trace() const;
  void write_chrome_trace(const std::string& path) const;
  void write_chrome_trace() const;  // to the path given to open()

 private:
  std::string path_;
  std::vector<CpuRange> cpu_;
  std::vector<GpuInterval> gpu_;
  std::vector<BucketRecord> buckets_;
};

// The clock of every trace event: microseconds of CLOCK_MONOTONIC (steady_clock), which all
// processes of a host share, so ranks on one machine line up. GPU times are placed on it by
// recording a reference event at a known trace_clock_us() and adding cudaEventElapsedTime.
double trace_clock_us();

// One scope, both views: an NVTX range (for nsys) and, when `recorder` is not null (--trace), a
// CpuRange from construction to end() or destruction. Move-only.
class TracedRange {
 public:
  TracedRange(TraceRecorder* recorder, const std::string& name, NvtxColor color, int rank, int64_t step,
              int thread = 0);
  ~TracedRange() { end(); }
  TracedRange(TracedRange&& other) noexcept;
  TracedRange& operator=(TracedRange&&) = delete;
  TracedRange(const TracedRange&) = delete;
  TracedRange& operator=(const TracedRange&) = delete;

  void end() noexcept;  // idempotent

 private:
  NvtxRange nvtx_;
  TraceRecorder* recorder_;
  CpuRange range_;
};

// Throws vitddp::Error with one line ("--trace PATH: ...") unless PATH names a file that can be
// created or overwritten. Leaves no file behind when there was none.
void check_trace_path(const std::string& path, const std::string& flag = "--trace");

}  // namespace vitddp
