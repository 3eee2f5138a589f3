#include "distributed/nccl/nccl_memory.h"

#include <nccl.h>

#include <array>
#include <atomic>
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
    const size_t now = current_[device].fetch_add(nbytes) + nbytes;
    for (size_t peak = peak_[device].load(); now > peak && !peak_[device].compare_exchange_weak(peak, now);) {
    }
    return ptr;
  }

  void deallocate(void* ptr, size_t nbytes, int device) noexcept override {
    if (!ptr) return;
    int previous = device;
    CUDA_WARN(cudaGetDevice(&previous));
    if (previous != device) CUDA_WARN(cudaSetDevice(device));
    NCCL_WARN(ncclMemFree(ptr));
    if (previous != device) CUDA_WARN(cudaSetDevice(previous));
    current_[device].fetch_sub(nbytes);
  }

  size_t current_bytes(int device) const override { return current_[device].load(); }
  size_t peak_bytes(int device) const override { return peak_[device].load(); }
  void reset_peak(int device) override { peak_[device].store(current_[device].load()); }

 private:
  std::array<std::atomic<size_t>, kMaxDevices> current_{};
  std::array<std::atomic<size_t>, kMaxDevices> peak_{};
};

}  // namespace

Allocator& nccl_memory_allocator() {
  static NcclMemoryAllocator allocator;
  return allocator;
}

}  // namespace vitddp
