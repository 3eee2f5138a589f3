#include "framework/cuda/stream.h"

#include <array>
#include <mutex>

#include "framework/cuda/check.h"

namespace vitddp::cuda {

Stream Stream::create(int device, int priority) {
  int previous = current_device();
  set_device(device);
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority));
  set_device(previous);
  return Stream(s);
}

Stream::~Stream() {
  if (stream_) CUDA_WARN(cudaStreamDestroy(stream_));
}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (stream_) CUDA_WARN(cudaStreamDestroy(stream_));
    stream_ = o.stream_;
    o.stream_ = nullptr;
  }
  return *this;
}

void Stream::synchronize() const { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

Event Event::create(bool timing) {
  Event e;
  CUDA_CHECK(cudaEventCreateWithFlags(&e.event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}

Event::~Event() {
  if (event_) CUDA_WARN(cudaEventDestroy(event_));
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (event_) CUDA_WARN(cudaEventDestroy(event_));
    event_ = o.event_;
    o.event_ = nullptr;
  }
  return *this;
}

void Event::record(cudaStream_t stream) const { CUDA_CHECK(cudaEventRecord(event_, stream)); }
void Event::block(cudaStream_t stream) const { CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0)); }
void Event::synchronize() const { CUDA_CHECK(cudaEventSynchronize(event_)); }

bool Event::query() const {
  cudaError_t err = cudaEventQuery(event_);
  if (err == cudaErrorNotReady) return false;
  CUDA_CHECK(err);
  return true;
}

float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

namespace {
struct PriorityRange {
  int least = 0, greatest = 0;
};
const PriorityRange& priority_range() {
  static const PriorityRange range = [] {
    PriorityRange r;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&r.least, &r.greatest));
    return r;
  }();
  return range;
}
}  // namespace

int communication_priority() { return priority_range().greatest; }
int compute_priority() {
  const PriorityRange& r = priority_range();
  // Lower numbers are higher priorities. With two levels, compute shares the least with the
  // background, so that communication stays above it.
  return r.least - 1 > r.greatest ? r.least - 1 : r.least;
}
int background_priority() { return priority_range().least; }

namespace {
constexpr int kMaxDevices = 64;
thread_local std::array<cudaStream_t, kMaxDevices> t_current{};
thread_local std::array<bool, kMaxDevices> t_has_current{};

cudaStream_t default_stream(int device) {
  static std::array<Stream, kMaxDevices> streams;
  static std::array<std::once_flag, kMaxDevices> once;
  std::call_once(once[device], [&] { streams[device] = Stream::create(device, compute_priority()); });
  return streams[device].get();
}
}  // namespace

int current_device() {
  int d = 0;
  CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int device) { CUDA_CHECK(cudaSetDevice(device)); }

DeviceScope::DeviceScope(int device) noexcept {
  CUDA_WARN(cudaGetDevice(&previous_));
  switched_ = previous_ != device;
  if (switched_) CUDA_WARN(cudaSetDevice(device));
}

DeviceScope::~DeviceScope() {
  if (switched_) CUDA_WARN(cudaSetDevice(previous_));
}

cudaStream_t current_stream() {
  int d = current_device();
  return t_has_current[d] ? t_current[d] : default_stream(d);
}

StreamGuard::StreamGuard(cudaStream_t stream) : previous_(current_stream()) {
  int d = current_device();
  t_current[d] = stream;
  t_has_current[d] = true;
}

StreamGuard::~StreamGuard() {
  int d = 0;
  if (cudaGetDevice(&d) == cudaSuccess) t_current[d] = previous_;
}

namespace {
cudaStream_t fork_to(cudaStream_t side, const Event& fork_point) {
  fork_point.record(current_stream());
  fork_point.block(side);
  return side;
}
}  // namespace

ForkedStreamScope::ForkedStreamScope(cudaStream_t side, const Event& fork_point)
    : guard_(fork_to(side, fork_point)) {}

}  // namespace vitddp::cuda
