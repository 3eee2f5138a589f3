// Allocators per device type. The CPU one hands out 64-byte aligned host memory; the CUDA one
// (framework/cuda/allocator.h) exists when the CUDA backend is built.
#pragma once

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

// Throws when `device` has no allocator (a CUDA device in a CPU-only build).
Allocator& allocator_for(Device device);

}  // namespace vitddp

