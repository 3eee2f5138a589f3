#include "framework/cuda/host_memory.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <vector>

#include "framework/cuda/check.h"

namespace vitddp::cuda {
namespace {

class CachingPinnedAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, int) override {
    std::lock_guard<std::mutex> lock(mutex_);
    void* ptr = nullptr;
    auto& free_list = free_[nbytes];
    if (!free_list.empty()) {
      ptr = free_list.back();
      free_list.pop_back();
    } else {
      CUDA_CHECK(cudaHostAlloc(&ptr, nbytes, cudaHostAllocDefault));
    }
    current_ += nbytes;
    peak_ = std::max(peak_, current_);
    return ptr;
  }
  void deallocate(void* ptr, size_t nbytes, int) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    free_[nbytes].push_back(ptr);  // kept for reuse; the process exit releases it
    current_ -= nbytes;
  }
  size_t current_bytes(int) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return current_;
  }
  size_t peak_bytes(int) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }
  void reset_peak(int) override {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = current_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;
  size_t current_ = 0;
  size_t peak_ = 0;
};

}  // namespace

Allocator& pinned_host_allocator() {
  static CachingPinnedAllocator* allocator = new CachingPinnedAllocator();  // never destroyed: see header
  return *allocator;
}

}  // namespace vitddp::cuda
