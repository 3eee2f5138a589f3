#include "framework/cuda/allocator.h"

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <mutex>

#include "framework/cuda/check.h"

namespace vitddp::cuda {
namespace {

// Note [Device allocator]
// A plain cudaMalloc/cudaFree allocator with per-device current/peak accounting. Issue [2/7]
// replaces it with a stream-aware caching allocator so the steady state never calls cudaMalloc.
class PlainDeviceAllocator final : public Allocator {
 public:
  static constexpr int kMaxDevices = 64;

  void* allocate(size_t nbytes, int device) override {
    VITDDP_CHECK(device >= 0 && device < kMaxDevices, "cuda device index ", device, " out of range");
    int previous = 0;
    CUDA_CHECK(cudaGetDevice(&previous));
    CUDA_CHECK(cudaSetDevice(device));
    void* ptr = nullptr;
    cudaError_t err = cudaMalloc(&ptr, nbytes);
    CUDA_WARN(cudaSetDevice(previous));
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw Error("out of memory on cuda:" + std::to_string(device) + " allocating " + std::to_string(nbytes) +
                  " bytes (" + std::to_string(current_[device].load()) + " in use)");
    }
    CUDA_CHECK(err);
    size_t now = current_[device].fetch_add(nbytes) + nbytes;
    size_t peak = peak_[device].load();
    while (now > peak && !peak_[device].compare_exchange_weak(peak, now)) {
    }
    return ptr;
  }
  void deallocate(void* ptr, size_t nbytes, int device) noexcept override {
    CUDA_WARN(cudaFree(ptr));
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

Allocator& device_allocator() {
  static PlainDeviceAllocator allocator;
  return allocator;
}

}  // namespace vitddp::cuda
