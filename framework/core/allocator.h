// Allocators per device type. The CPU one hands out 64-byte aligned host memory (large tensors on
// huge pages: framework/core/host_alloc.h); the CUDA one
// (framework/cuda/allocator.h) exists when the CUDA backend is built.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "framework/core/dtype.h"

namespace vitddp {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes, int device_index) = 0;
  // Never throws: called from Storage's destructor.
  virtual void deallocate(void* ptr, size_t nbytes, int device_index) noexcept = 0;
  virtual size_t current_bytes(int device_index) const = 0;
  virtual size_t peak_bytes(int device_index) const = 0;
  virtual void reset_peak(int device_index) = 0;
};

// An allocator's bytes in use and the most in use at once since the last reset, safe to update
// from any thread.
class ByteCounter {
 public:
  void add(size_t nbytes) {
    const size_t now = current_.fetch_add(nbytes) + nbytes;
    size_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
  }
  void sub(size_t nbytes) { current_.fetch_sub(nbytes); }
  size_t current() const { return current_.load(); }
  size_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(current_.load()); }

 private:
  std::atomic<size_t> current_{0};
  std::atomic<size_t> peak_{0};
};

// Throws when `device` has no allocator (a CUDA device in a CPU-only build).
Allocator& allocator_for(Device device);

}  // namespace vitddp

