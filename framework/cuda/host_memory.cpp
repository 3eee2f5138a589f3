#include "framework/cuda/host_memory.h"

#include <cuda_runtime.h>

#include <atomic>

#include "framework/cuda/check.h"

namespace vitddp::cuda {
namespace {

class PinnedHostAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, int) override {
    void* ptr = nullptr;
    CUDA_CHECK(cudaHostAlloc(&ptr, nbytes, cudaHostAllocDefault));
    size_t now = current_.fetch_add(nbytes) + nbytes;
    size_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    return ptr;
  }
  void deallocate(void* ptr, size_t nbytes, int) noexcept override {
    CUDA_WARN(cudaFreeHost(ptr));
    current_.fetch_sub(nbytes);
  }
  size_t current_bytes(int) const override { return current_.load(); }
  size_t peak_bytes(int) const override { return peak_.load(); }
  void reset_peak(int) override { peak_.store(current_.load()); }

 private:
  std::atomic<size_t> current_{0};
  std::atomic<size_t> peak_{0};
};

}  // namespace

Allocator& pinned_host_allocator() {
  static PinnedHostAllocator allocator;
  return allocator;
}

}  // namespace vitddp::cuda
