#include "train/observe/step_tracer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "framework/core/error.h"

#if VITDDP_WITH_CUDA
#include "distributed/nccl/pg_nccl.h"
#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"
#endif

namespace vitddp {

// Points in the work of the compute and communication streams, read on the trace clock later.
class MarkClock {
 public:
  virtual ~MarkClock() = default;
  virtual size_t mark(GpuStream stream) = 0;
  // Orders the comm stream after the compute work issued so far (the reducer's handshake does
  // the same just after; doing it first lets the start mark sit after that wait).
  virtual void comm_after_compute() = 0;
  // Trace-clock microseconds of a mark; waits for the work before it on the GPU.
  virtual double time_us(size_t id) = 0;
  // The same, measured from `anchor` (an earlier mark whose time is `anchor_us`): CUDA reports
  // elapsed times as float milliseconds, whose step grows with the distance (4 us after a
  // minute), so the marks of a step are timed from the step's first mark.
  virtual double time_us(size_t id, size_t anchor, double anchor_us) = 0;
  // Marks below `id` will not be read again (their events may be reused).
  virtual void release_before(size_t id) = 0;
  // True when marks are host times taken at once (no streams: the CPU backend).
  virtual bool on_host() const = 0;
};

namespace {

class HostMarkClock final : public MarkClock {
 public:
  size_t mark(GpuStream) override {
    times_.push_back(trace_clock_us());
    return base_ + times_.size() - 1;
  }
  void comm_after_compute() override {}
  bool on_host() const override { return true; }
  double time_us(size_t id) override { return times_.at(id - base_); }
  double time_us(size_t id, size_t, double) override { return time_us(id); }
  void release_before(size_t id) override {
    if (id <= base_) return;
    times_.erase(times_.begin(), times_.begin() + static_cast<std::ptrdiff_t>(id - base_));
    base_ = id;
  }

 private:
  size_t base_ = 0;  // id of times_[0]
  std::vector<double> times_;
};

#if VITDDP_WITH_CUDA
class CudaMarkClock final : public MarkClock {
 public:
  // `nccl` (may be null): the group whose comm stream the comm marks go on.
  explicit CudaMarkClock(ProcessGroupNccl* nccl)
      : nccl_(nccl), comm_(nccl ? nccl->comm_stream() : nullptr), reference_(cuda::Event::create(true)) {
    // The reference event's host time: record it on an idle point of the compute stream and
    // wait for it; the error is the synchronisation latency (microseconds).
    reference_.record(cuda::current_stream());
    reference_.synchronize();
    reference_us_ = trace_clock_us();
    compute_done_ = cuda::Event::create(false);
  }
  size_t mark(GpuStream stream) override {
    cuda::Event event = free_.empty() ? cuda::Event::create(true) : take_free();
    if (stream == GpuStream::kComm && nccl_) nccl_->finish_enqueue();  // after NCCL's own kernel
    event.record(stream == GpuStream::kComm && comm_ ? comm_ : cuda::current_stream());
    events_.push_back(std::move(event));
    return base_ + events_.size() - 1;
  }
  bool on_host() const override { return false; }
  void comm_after_compute() override {
    if (!comm_) return;
    nccl_->finish_enqueue();
    compute_done_.record(cuda::current_stream());
    compute_done_.block(comm_);
  }
  double time_us(size_t id) override {
    const cuda::Event& event = events_.at(id - base_);
    event.synchronize();
    return reference_us_ + 1e3 * static_cast<double>(event.elapsed_ms_since(reference_));
  }
  double time_us(size_t id, size_t anchor, double anchor_us) override {
    const cuda::Event& event = events_.at(id - base_);
    event.synchronize();
    return anchor_us + 1e3 * static_cast<double>(event.elapsed_ms_since(events_.at(anchor - base_)));
  }
  void release_before(size_t id) override {
    if (id <= base_) return;
    for (size_t k = 0; k < id - base_; ++k) free_.push_back(std::move(events_[k]));
    events_.erase(events_.begin(), events_.begin() + static_cast<std::ptrdiff_t>(id - base_));
    base_ = id;
  }

 private:
  cuda::Event take_free() {
    cuda::Event e = std::move(free_.back());
    free_.pop_back();
    return e;
  }
  ProcessGroupNccl* nccl_;
  cudaStream_t comm_;
  cuda::Event reference_;
  double reference_us_ = 0;
  cuda::Event compute_done_;
  size_t base_ = 0;
  std::vector<cuda::Event> events_;  // events_[k] is mark base_ + k
  std::vector<cuda::Event> free_;
};
#endif

std::unique_ptr<MarkClock> make_mark_clock(Device device, ProcessGroup* group) {
#if VITDDP_WITH_CUDA
  if (device.is_cuda()) {
    return std::make_unique<CudaMarkClock>(dynamic_cast<ProcessGroupNccl*>(group));
  }
#else
  (void)group;
#endif
  VITDDP_CHECK(!device.is_cuda(), "--trace on a GPU needs a CUDA build");
  return std::make_unique<HostMarkClock>();
}

std::string part_path(const std::string& path, int rank) { return path + ".rank-" + std::to_string(rank) + ".json"; }

}  // namespace

StepTracer::StepTracer(const std::string& path, int rank, int world_size, Device device, ProcessGroup* group)
    : path_(path), rank_(rank), world_size_(world_size), group_(group), clock_(make_mark_clock(device, group)) {
  check_trace_path(rank == 0 ? path : part_path(path, rank));
}

StepTracer::~StepTracer() = default;

void StepTracer::begin_step(int64_t step) {
  step_ = step;
  pending_.push_back(PendingStep{step, {}, {}});
  step_interval_ = begin_interval(nvtx_step_name(step + 1));
}

void StepTracer::end_step() {
  VITDDP_ASSERT(!pending_.empty(), "StepTracer::end_step without begin_step");
  end_interval(step_interval_);
}

void StepTracer::read_completed_steps(size_t keep_newest) {
  // All but the newest `keep_newest` steps have run to completion on the GPU (StepClock waited
  // for them, and a step's comm work ends before its compute does, or, with updates in the
  // next forward, before the next step's compute does): read them without stalling.
  while (pending_.size() > keep_newest) {
    resolve(pending_.front());
    pending_.erase(pending_.begin());
  }
}

size_t StepTracer::begin_interval(const std::string& name) {
  VITDDP_ASSERT(!pending_.empty(), "StepTracer: an interval outside a step");
  PendingInterval interval{name, GpuStream::kCompute, clock_->mark(GpuStream::kCompute), 0};
  pending_.back().intervals.push_back(interval);
  return pending_.back().intervals.size() - 1;
}

void StepTracer::end_interval(size_t id) { pending_.back().intervals.at(id).end = clock_->mark(GpuStream::kCompute); }

StepTracer::PendingBucket& StepTracer::bucket_slot(size_t index, const BucketInfo& bucket) {
  VITDDP_ASSERT(!pending_.empty(), "StepTracer: a bucket outside a step");
  std::vector<PendingBucket>& buckets = pending_.back().buckets;
  for (PendingBucket& b : buckets)
    if (b.index == static_cast<int>(index)) return b;
  buckets.push_back(PendingBucket{static_cast<int>(index), static_cast<int64_t>(bucket.bytes), 0, 0, 0, false});
  return buckets.back();
}

void StepTracer::bucket_ready(size_t index, const BucketInfo& bucket) {
  bucket_slot(index, bucket).ready = clock_->mark(GpuStream::kCompute);
}

void StepTracer::launch_begin(size_t index, const BucketInfo& bucket) {
  clock_->comm_after_compute();
  bucket_slot(index, bucket).start = clock_->mark(GpuStream::kComm);
}

void StepTracer::launch_end(size_t index, const BucketInfo& bucket) {
  PendingBucket& b = bucket_slot(index, bucket);
  b.end = clock_->mark(GpuStream::kComm);
  b.has_end = true;
}

void StepTracer::bucket_finished(size_t index, const BucketInfo& bucket) {
  if (!clock_->on_host()) return;  // the comm stream's end mark (launch_end) says it
  bucket_slot(index, bucket).end = clock_->mark(GpuStream::kComm);  // on the CPU: when finalize found it done
}

void StepTracer::resolve(PendingStep& step) {
  if (step.intervals.empty()) return;
  // The step's first mark (its "step" interval's begin) anchors the others.
  const size_t anchor = step.intervals.front().begin;
  const double anchor_us = clock_->time_us(anchor);
  auto at = [&](size_t id) { return clock_->time_us(id, anchor, anchor_us); };
  size_t highest = 0;
  for (const PendingInterval& i : step.intervals) {
    recorder_.add(GpuInterval{i.name, rank_, step.step, i.stream, at(i.begin), at(i.end)});
    highest = std::max({highest, i.begin + 1, i.end + 1});
  }
  for (const PendingBucket& b : step.buckets) {
    recorder_.add(BucketRecord{rank_, step.step, b.index, b.bytes, at(b.ready), at(b.start), at(b.end)});
    highest = std::max({highest, b.ready + 1, b.start + 1, b.end + 1});
  }
  clock_->release_before(highest);
}

std::optional<RunStats> StepTracer::finish(int64_t first_analysed_step) {
  for (PendingStep& step : pending_) resolve(step);
  pending_.clear();
  if (rank_ != 0) {
    const std::string part = part_path(path_, rank_);
    std::ofstream out(part);
    out << recorder_.to_json().dump();
    out.close();
    VITDDP_CHECK(!out.fail(), "--trace ", part, ": writing failed (disk full?)");
  }
  if (group_) group_->barrier();  // every part is written
  if (rank_ != 0) return std::nullopt;
  TraceRecorder all = recorder_;
  for (int r = 1; r < world_size_; ++r) {
    const std::string part = part_path(path_, r);
    std::ifstream in(part);
    VITDDP_CHECK(in.good(), "--trace: rank ", r, "'s events ", part, " are missing (the trace folder must be shared "
                 "by every rank)");
    std::stringstream text;
    text << in.rdbuf();
    all.merge(TraceRecorder::from_json(nlohmann::json::parse(text.str())));
    std::error_code ec;
    std::filesystem::remove(part, ec);
  }
  all.write_chrome_trace(path_);
  TraceRecorder timed;
  for (const CpuRange& r : all.cpu_ranges())
    if (r.step >= first_analysed_step) timed.add(r);
  for (const GpuInterval& g : all.gpu_intervals())
    if (g.step >= first_analysed_step) timed.add(g);
  for (const BucketRecord& b : all.buckets())
    if (b.step >= first_analysed_step) timed.add(b);
  return timed.analyze();
}

void StepTracer::step_begins(int64_t step) {
  begin_step(step);
  open_ranges_.push_back(CpuRange{nvtx_step_name(step + 1), rank_, step, 0, trace_clock_us(), 0});
}

void StepTracer::phase_begins(Phase phase) {
  open_ranges_.push_back(CpuRange{phase_name(phase), rank_, step_, 0, trace_clock_us(), 0});
  open_intervals_.push_back(begin_interval(phase_name(phase)));
}

void StepTracer::phase_issued(Phase) {
  if (open_intervals_.empty()) return;
  end_interval(open_intervals_.back());
  open_intervals_.pop_back();
}

void StepTracer::phase_ends(Phase phase) {
  phase_issued(phase);
  close_range();
}

void StepTracer::step_ends(int64_t) {
  close_range();
  end_step();
}

void StepTracer::steps_finished(int newest_running) { read_completed_steps(static_cast<size_t>(newest_running)); }

void StepTracer::close_range() {
  if (open_ranges_.empty()) return;
  CpuRange range = std::move(open_ranges_.back());
  open_ranges_.pop_back();
  range.end_us = trace_clock_us();
  try {
    recorder_.add(std::move(range));
  } catch (...) {  // out of memory while tracing: lose the range, not the run
  }
}

}  // namespace vitddp
