#include "train/step_clock.h"

#include <algorithm>
#include <chrono>

#include "framework/optim/nonfinite.h"

#if VITDDP_WITH_CUDA
#include "framework/cuda/check.h"
#include "framework/cuda/host_memory.h"
#include "framework/cuda/stream.h"
#endif

namespace vitddp {
namespace {

// Grows with the steps ended, not with the run's length (Note [A ring of step events]).
class WallClock final : public StepClock {
 public:
  explicit WallClock(int64_t first) : first_(first), ends_{Clock::now()} {}
  void end_step(int64_t step, const Tensor& loss, const Tensor& nonfinite, const Tensor& stop) override {
    VITDDP_ASSERT(step == first_ + static_cast<int64_t>(losses_.size()), "StepClock: step ", step,
                  " ended out of order");
    losses_.push_back(loss.item());
    flags_.push_back(nonfinite.defined() ? nonfinite.to(Device::cpu()).data<int64_t>()[0] : kNoNonfinite);
    stops_.push_back(stop.defined() && stop.item() > 0);
    ends_.push_back(Clock::now());
  }
  double loss(int64_t step) override { return losses_[index(step)]; }
  int64_t nonfinite(int64_t step) override { return flags_[index(step)]; }
  bool stop_requested(int64_t step) override { return stops_[index(step)]; }
  std::vector<double> step_seconds(int64_t first, int64_t last) override {
    std::vector<double> out;
    for (int64_t s = first; s <= last; ++s) out.push_back(seconds(ends_[index(s)], ends_[index(s) + 1]));
    return out;
  }
  double span_seconds(int64_t first, int64_t last) override {
    return seconds(ends_[index(first)], ends_[index(last) + 1]);
  }

 private:
  using Clock = std::chrono::steady_clock;
  static double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
  size_t index(int64_t step) const {
    VITDDP_ASSERT(step >= first_ && step - first_ < static_cast<int64_t>(losses_.size()), "StepClock: step ", step,
                  " was not ended");
    return static_cast<size_t>(step - first_);
  }
  int64_t first_;
  std::vector<Clock::time_point> ends_;  // ends_[i + 1]: end of step first_ + i; ends_[0]: start
  std::vector<double> losses_;
  std::vector<int64_t> flags_;
  std::vector<bool> stops_;
};

#if VITDDP_WITH_CUDA
// Note [A ring of step events]
// The clock records one event per step end and copies each step's loss, non-finite flag and
// stop request to pinned memory. It holds kRing events and pinned slots, reused in turn:
// before step s reuses the slots of step s - kRing (and overwrites the event that started step
// s - kRing + 1), the steps up to s - kRing + 1 are read into host vectors (their duration, loss,
// flag, stop request; 32 bytes of host memory a step). Those steps ran long ago (the trainer
// reads every step within two of issuing it), so reading them does not wait; a caller that runs
// further ahead is held kRing - 1 steps behind. A step not read yet is read from its slots.
// Reason: an event of its own for every step, made up front, would cost a run of 10^8 steps
// 10^8 events and 1.6 GB of pinned memory before its first step.
class CudaEventClock final : public StepClock {
 public:
  static constexpr int64_t kRing = 64;

  explicit CudaEventClock(int64_t first)
      : first_(first),
        host_losses_(Tensor::empty_with({kRing}, DType::kF32, cuda::pinned_host_allocator())),
        host_flags_(Tensor::empty_with({kRing}, DType::kI64, cuda::pinned_host_allocator())),
        host_stops_(Tensor::empty_with({kRing}, DType::kF32, cuda::pinned_host_allocator())),
        ended_through_(first - 1) {
    for (int64_t i = 0; i < kRing; ++i) events_.push_back(cuda::Event::create(/*timing=*/true));
    event(first).record(cuda::current_stream());  // the start of step `first`
  }
  void end_step(int64_t step, const Tensor& loss, const Tensor& nonfinite, const Tensor& stop) override {
    VITDDP_ASSERT(step == ended_through_ + 1, "StepClock: step ", step, " ended out of order");
    // This step's slots held step - kRing; its end event replaces the start of step - kRing + 1.
    read_steps_through(step - kRing + 1);
    const int64_t slot = step % kRing;
    // Not fill_(double) for the flag: INT64_MAX does not survive the trip through a double.
    host_flags_.data<int64_t>()[slot] = kNoNonfinite;
    host_stops_.data<float>()[slot] = 0.0f;
    Tensor value = loss.dtype() == DType::kF32 ? loss : loss.to(DType::kF32);
    // Pinned destinations: asynchronous copies, read after the step's event.
    CUDA_CHECK(cudaMemcpyAsync(host_losses_.data<float>() + slot, value.data_ptr(), sizeof(float),
                               cudaMemcpyDeviceToHost, cuda::current_stream()));
    if (nonfinite.defined())
      CUDA_CHECK(cudaMemcpyAsync(host_flags_.data<int64_t>() + slot, nonfinite.data_ptr(), sizeof(int64_t),
                                 cudaMemcpyDeviceToHost, cuda::current_stream()));
    if (stop.defined())
      CUDA_CHECK(cudaMemcpyAsync(host_stops_.data<float>() + slot, stop.data_ptr(), sizeof(float),
                                 cudaMemcpyDeviceToHost, cuda::current_stream()));
    event(step + 1).record(cuda::current_stream());
    ended_through_ = step;
  }
  int64_t nonfinite(int64_t step) override { return read(step).flag; }
  bool stop_requested(int64_t step) override { return read(step).stop; }
  double loss(int64_t step) override { return read(step).loss; }
  std::vector<double> step_seconds(int64_t first, int64_t last) override {
    std::vector<double> out;
    for (int64_t s = first; s <= last; ++s) out.push_back(read(s).seconds);
    return out;
  }
  // The sum of the steps' times: the events between them are gone (the sum differs from one
  // event pair's time by float rounding only).
  double span_seconds(int64_t first, int64_t last) override {
    double total = 0.0;
    for (int64_t s = first; s <= last; ++s) total += read(s).seconds;
    return total;
  }

 private:
  struct StepRecord {
    double seconds = 0.0;
    double loss = 0.0;
    int64_t flag = kNoNonfinite;
    bool stop = false;
  };
  cuda::Event& event(int64_t index) { return events_[index % kRing]; }  // index i: the end of step i - 1
  // A step already ended, from the host vectors or, not read yet, from its slots.
  StepRecord read(int64_t step) {
    VITDDP_ASSERT(step >= first_ && step <= ended_through_, "StepClock: step ", step, " was not ended");
    if (step <= read_through()) return records_[step - first_];
    return from_slots(step);
  }
  int64_t read_through() const { return first_ + static_cast<int64_t>(records_.size()) - 1; }
  StepRecord from_slots(int64_t step) {
    event(step + 1).synchronize();
    const int64_t slot = step % kRing;
    StepRecord r;
    r.seconds = event(step + 1).elapsed_ms_since(event(step)) / 1e3;
    r.loss = host_losses_.data<float>()[slot];
    r.flag = host_flags_.data<int64_t>()[slot];
    r.stop = host_stops_.data<float>()[slot] > 0;
    return r;
  }
  void read_steps_through(int64_t last) {
    for (int64_t s = read_through() + 1; s <= std::min(last, ended_through_); ++s) records_.push_back(from_slots(s));
  }

  int64_t first_;
  std::vector<cuda::Event> events_;  // a ring: see event()
  Tensor host_losses_;               // (kRing) f32, pinned: slot step % kRing
  Tensor host_flags_;                // (kRing) i64, pinned
  Tensor host_stops_;                // (kRing) f32, pinned
  std::vector<StepRecord> records_;  // steps [first_, read_through()], read from their slots
  int64_t ended_through_;
};
#endif

}  // namespace

std::unique_ptr<StepClock> make_step_clock(Device device, int64_t total_steps, int64_t first_step) {
  VITDDP_ASSERT(first_step >= 0 && first_step <= total_steps, "make_step_clock: first step out of range");
#if VITDDP_WITH_CUDA
  if (device.is_cuda()) return std::make_unique<CudaEventClock>(first_step);
#else
  (void)device;
#endif
  return std::make_unique<WallClock>(first_step);
}

}  // namespace vitddp
