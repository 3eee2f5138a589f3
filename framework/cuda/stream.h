// Streams and events as move-only RAII handles, and the thread's current stream, on which
// every op of that thread launches its kernels. The trainer makes its compute stream current;
// the loader and the reducer use streams of their own and order them with events.
#pragma once

#include <cuda_runtime.h>

namespace vitddp::cuda {

class Stream {
 public:
  Stream() = default;
  // A non-blocking stream on `device` at `priority` (lower numbers = higher priority; see Note
  // [Stream priorities] for the classes).
  static Stream create(int device, int priority);
  ~Stream();
  Stream(Stream&& o) noexcept : stream_(o.stream_) { o.stream_ = nullptr; }
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const;

 private:
  explicit Stream(cudaStream_t s) : stream_(s) {}
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  Event() = default;
  // `timing`: the event can measure elapsed time (slightly costlier to record).
  static Event create(bool timing = false);
  ~Event();
  Event(Event&& o) noexcept : event_(o.event_) { o.event_ = nullptr; }
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream) const;
  // Makes `stream` wait for the work recorded in this event (no host synchronisation).
  void block(cudaStream_t stream) const;
  void synchronize() const;
  bool query() const;
  // Milliseconds between `start` and this event (both recorded with timing).
  float elapsed_ms_since(const Event& start) const;

 private:
  cudaEvent_t event_ = nullptr;
};

// Note [Stream priorities]
// Three classes, from the device's range (cudaDeviceGetStreamPriorityRange): communication
// (NCCL's and the host copy's streams) at the greatest, so that a collective's blocks get SMs
// as soon as any free up; compute (the per-device default stream, the weight gradients' side
// stream) one above the least; background at the least, for work that should only fill the SMs
// compute leaves idle (ShardedUpdate's updates beside backward). The block
// scheduler starts pending blocks of a higher-priority stream first. A CUDA graph keeps each
// kernel's captured priority (framework/cuda/graph.cpp). Where the range has two levels, compute
// and background share the lower; with one, all three are the same.
int communication_priority();
int compute_priority();
int background_priority();

// The calling thread's current stream for the current device (a per-device non-blocking
// stream at compute_priority() unless a StreamGuard says otherwise).
cudaStream_t current_stream();

class StreamGuard {
 public:
  explicit StreamGuard(cudaStream_t stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  cudaStream_t previous_;
};

// Work enqueued inside the scope runs on `side` after everything enqueued so far on the current
// stream: `fork_point` is recorded on the current stream, `side` waits for it, and `side` is
// the current stream until the scope ends. Joining back is the caller's to order (an event of
// the side work that the other stream waits for, as a collective's Work::wait() is).
class ForkedStreamScope {
 public:
  ForkedStreamScope(cudaStream_t side, const Event& fork_point);

 private:
  StreamGuard guard_;
};

// Device of the calling thread.
int current_device();
void set_device(int device);

// Makes `device` current for the scope and the previous one current again after it, only
// warning on failure (for destructors and frees).
class DeviceScope {
 public:
  explicit DeviceScope(int device) noexcept;
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace vitddp::cuda
