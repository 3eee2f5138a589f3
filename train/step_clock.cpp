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

class WallClock final : public StepClock {
 public:
  WallClock(int64_t total, int64_t first)
      : ends_(total + 1), losses_(total), flags_(total, kNoNonfinite), stops_(total, false) {
    ends_[first] = Clock::now();
  }
  void end_step(int64_t step, const Tensor& loss, const Tensor& nonfinite, const Tensor& stop) override {
    losses_[step] = loss.item();
    if (nonfinite.defined()) flags_[step] = nonfinite.to(Device::cpu()).data<int64_t>()[0];
    if (stop.defined()) stops_[step] = stop.item() > 0;
    ends_[step + 1] = Clock::now();
  }
  double loss(int64_t step) override { return losses_[step]; }
  int64_t nonfinite(int64_t step) override { return flags_[step]; }
  bool stop_requested(int64_t step) override { return stops_[step]; }
  std::vector<double> step_seconds(int64_t first, int64_t last) override {
    std::vector<double> out;
    for (int64_t s = first; s <= last; ++s) out.push_back(seconds(ends_[s], ends_[s + 1]));
    return out;
  }
  double span_seconds(int64_t first, int64_t last) override { return seconds(ends_[first], ends_[last + 1]); }

 private:
  using Clock = std::chrono::steady_clock;
  static double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
  std::vector<Clock::time_point> ends_;  // ends_[s + 1]: end of step s; ends_[first]: start
  std::vector<double> losses_;
  std::vector<int64_t> flags_;
  std::vector<bool> stops_;
};

#if VITDDP_WITH_CUDA
class CudaEventClock final : public StepClock {
 public:
  CudaEventClock(int64_t total, int64_t first)
      : host_losses_(Tensor::empty_with({total}, DType::kF32, cuda::pinned_host_allocator())),
        host_flags_(Tensor::empty_with({total}, DType::kI64, cuda::pinned_host_allocator())),
        host_stops_(Tensor::empty_with({total}, DType::kF32, cuda::pinned_host_allocator())) {
    // Not fill_(double): INT64_MAX does not survive the trip through a double.
    std::fill_n(host_flags_.data<int64_t>(), total, kNoNonfinite);
    host_stops_.fill_(0.0);
    for (int64_t i = 0; i <= total; ++i) ends_.push_back(cuda::Event::create(/*timing=*/true));
    // Only steps from `first` on are timed: the events before it are never recorded.
    ends_[first].record(cuda::current_stream());
  }
  void end_step(int64_t step, const Tensor& loss, const Tensor& nonfinite, const Tensor& stop) override {
    Tensor slot = host_losses_.as_strided({}, {}, step);
    Tensor value = loss.dtype() == DType::kF32 ? loss : loss.to(DType::kF32);
    // Pinned destinations: asynchronous copies, read after the step's event.
    CUDA_CHECK(cudaMemcpyAsync(slot.data_ptr(), value.data_ptr(), sizeof(float), cudaMemcpyDeviceToHost,
                               cuda::current_stream()));
    if (nonfinite.defined())
      CUDA_CHECK(cudaMemcpyAsync(host_flags_.as_strided({}, {}, step).data_ptr(), nonfinite.data_ptr(),
                                 sizeof(int64_t), cudaMemcpyDeviceToHost, cuda::current_stream()));
    if (stop.defined())
      CUDA_CHECK(cudaMemcpyAsync(host_stops_.as_strided({}, {}, step).data_ptr(), stop.data_ptr(), sizeof(float),
                                 cudaMemcpyDeviceToHost, cuda::current_stream()));
    ends_[step + 1].record(cuda::current_stream());
  }
  int64_t nonfinite(int64_t step) override {
    ends_[step + 1].synchronize();
    return host_flags_.data<int64_t>()[step];
  }
  bool stop_requested(int64_t step) override {
    ends_[step + 1].synchronize();
    return host_stops_.data<float>()[step] > 0;
  }
  double loss(int64_t step) override {
    ends_[step + 1].synchronize();
    return host_losses_.data<float>()[step];
  }
  std::vector<double> step_seconds(int64_t first, int64_t last) override {
    std::vector<double> out;
    for (int64_t s = first; s <= last; ++s) {
      ends_[s + 1].synchronize();
      out.push_back(ends_[s + 1].elapsed_ms_since(ends_[s]) / 1e3);
    }
    return out;
  }
  double span_seconds(int64_t first, int64_t last) override {
    ends_[last + 1].synchronize();
    return ends_[last + 1].elapsed_ms_since(ends_[first]) / 1e3;
  }

 private:
  std::vector<cuda::Event> ends_;  // ends_[s + 1]: end of step s; ends_[first]: start
  Tensor host_losses_;             // (total) f32, pinned
  Tensor host_flags_;              // (total) i64, pinned
  Tensor host_stops_;              // (total) f32, pinned
};
#endif

}  // namespace

std::unique_ptr<StepClock> make_step_clock(Device device, int64_t total_steps, int64_t first_step) {
  VITDDP_ASSERT(first_step >= 0 && first_step <= total_steps, "make_step_clock: first step out of range");
#if VITDDP_WITH_CUDA
  if (device.is_cuda()) return std::make_unique<CudaEventClock>(total_steps, first_step);
#endif
  return std::make_unique<WallClock>(total_steps, first_step);
}

}  // namespace vitddp
