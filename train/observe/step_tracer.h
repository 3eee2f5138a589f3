// StepTracer: feeds the built-in timeline (--trace FILE, train/observe/trace.h) from a running training
// loop. It marks points in the work of the compute and communication streams, turns them into
// intervals on the trace clock once the work has run, and watches the reducer's buckets.
//
//   on a GPU   a mark is a CUDA event recorded on the stream; a step's events are read one
//              step later (StepClock has waited for that step by then), so tracing never
//              synchronises inside a step. Event times are placed on the host clock through one
//              reference event timed against trace_clock_us() at start.
//   on a CPU   a mark is the host clock at once; the "compute stream" is the training thread,
//              and a bucket's communication ends when finalize() found it done (an upper bound:
//              Gloo finishes in the background).
//
// As a StepObserver, each step and phase (forward, backward, optimizer step) is a CPU range and a
// compute-stream interval, the interval ending when the phase's work is issued. At the end,
// finish() gathers every rank's events on rank 0 through files beside the trace
// (PATH.rank-R.json, removed after merging), writes the Chrome trace, and returns the analysis.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "distributed/reducer.h"
#include "framework/core/nvtx.h"
#include "train/observe/step_observer.h"
#include "train/observe/trace.h"

namespace vitddp {

class MarkClock;  // step_tracer.cpp: host clock or CUDA events

class StepTracer final : public BucketObserver, public StepObserver {
 public:
  // `group` may be null (one process); on a GPU with NCCL its communication stream is marked.
  StepTracer(const std::string& path, int rank, int world_size, Device device, ProcessGroup* group);
  ~StepTracer() override;
  StepTracer(const StepTracer&) = delete;
  StepTracer& operator=(const StepTracer&) = delete;

  void begin_step(int64_t step);
  // Marks the step's end on the compute stream.
  void end_step();
  // Reads the marks of the steps before the newest `keep_newest`. On a GPU it waits for their
  // events: call it once StepClock has waited for the step before those, and it never stalls.
  void read_completed_steps(size_t keep_newest = 1);

  // A compute-stream interval of the current step, from begin to end (name: kTraceForward, ...).
  size_t begin_interval(const std::string& name);
  void end_interval(size_t id);

  // StepObserver
  void step_begins(int64_t step) override;
  void phase_begins(Phase phase) override;
  void phase_issued(Phase phase) override;
  void phase_ends(Phase phase) override;
  void step_ends(int64_t step) override;
  void steps_finished(int newest_running) override;

  TraceRecorder& recorder() { return recorder_; }
  int rank() const { return rank_; }
  int64_t step() const { return step_; }

  // BucketObserver
  void bucket_ready(size_t index, const BucketInfo& bucket) override;
  void launch_begin(size_t index, const BucketInfo& bucket) override;
  void launch_end(size_t index, const BucketInfo& bucket) override;
  void bucket_finished(size_t index, const BucketInfo& bucket) override;

  // Collective: every rank calls it after its last step. Rank 0 writes the trace file and gets
  // the analysis of steps >= first_analysed_step (the timed steps); other ranks get nullopt.
  std::optional<RunStats> finish(int64_t first_analysed_step);

 private:
  struct PendingInterval {
    std::string name;
    GpuStream stream;
    size_t begin = 0, end = 0;  // mark ids
  };
  struct PendingBucket {
    int index = 0;
    int64_t bytes = 0;
    size_t ready = 0, start = 0, end = 0;
    bool has_end = false;
  };
  struct PendingStep {
    int64_t step = 0;
    std::vector<PendingInterval> intervals;
    std::vector<PendingBucket> buckets;
  };
  void resolve(PendingStep& step);
  void close_range();
  PendingBucket& bucket_slot(size_t index, const BucketInfo& bucket);

  std::string path_;
  int rank_ = 0;
  int world_size_ = 1;
  ProcessGroup* group_ = nullptr;
  std::unique_ptr<MarkClock> clock_;
  TraceRecorder recorder_;
  int64_t step_ = -1;
  std::vector<PendingStep> pending_;  // the current step last
  size_t step_interval_ = 0;
  std::vector<CpuRange> open_ranges_;  // the step's, then its open phase's
  std::vector<size_t> open_intervals_;  // the open phase's compute-stream interval
};

}  // namespace vitddp
