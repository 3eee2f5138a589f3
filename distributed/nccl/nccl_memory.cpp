#include "distributed/nccl/nccl_memory.h"

#include <nccl.h>

#include <array>
#include <string>

#include "distributed/nccl/nccl_check.h"
#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"

namespace vitddp {
namespace {

class NcclMemoryAllocator final : public Allocator {
 public:
  static constexpr int kMaxDevices = 64;

  void* allocate(size_t nbytes, int device) override {
    VITDDP_CHECK(device >= 0 && device < kMaxDevices, "cuda device index ", device, " out of range");
    const int previous = cuda::current_device();
    if (previous != device) cuda::set_device(device);
    void* ptr = nullptr;
    const ncclResult_t result = ncclMemAlloc(&ptr, nbytes);
    if (previous != device) cuda::set_device(previous);
    if (result != ncclSuccess)
      throw Error("ncclMemAlloc of " + std::to_string(nbytes) + " bytes on cuda:" + std::to_string(device) +
                  " failed: " + ncclGetErrorString(result) + " (--nccl-register needs it; run without it)");
    bytes_[device].add(nbytes);
    return ptr;
  }

  void deallocate(void* ptr, size_t nbytes, int device) noexcept override {
    if (!ptr) return;
    {
      cuda::DeviceScope scope(device);
      NCCL_WARN(ncclMemFree(ptr));
    }
    bytes_[device].sub(nbytes);
  }

  size_t current_bytes(int device) const override { return bytes_[device].current(); }
  size_t peak_bytes(int device) const override { return bytes_[device].peak(); }
  void reset_peak(int device) override { bytes_[device].reset_peak(); }

 private:
  std::array<ByteCounter, kMaxDevices> bytes_;
};

}  // namespace

Allocator& nccl_memory_allocator() {
  static NcclMemoryAllocator allocator;
  return allocator;
}

}  // namespace vitddp
