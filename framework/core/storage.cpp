#include "framework/core/storage.h"

#include <atomic>
#include <new>

#include "framework/core/allocator.h"
#include "framework/core/error.h"
#include "framework/core/host_alloc.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/allocator.h"
#endif

namespace vitddp {
namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, int) override {
    void* ptr = allocate_host(nbytes);
    if (!ptr) throw Error("out of host memory allocating " + std::to_string(nbytes) + " bytes");
    bytes_.add(nbytes);
    return ptr;
  }
  void deallocate(void* ptr, size_t nbytes, int) noexcept override {
    free_host(ptr);
    bytes_.sub(nbytes);
  }
  size_t current_bytes(int) const override { return bytes_.current(); }
  size_t peak_bytes(int) const override { return bytes_.peak(); }
  void reset_peak(int) override { bytes_.reset_peak(); }

 private:
  ByteCounter bytes_;
};

}  // namespace

Allocator& allocator_for(Device device) {
  static CpuAllocator cpu_allocator;
  if (device.is_cpu()) return cpu_allocator;
#if VITDDP_WITH_CUDA
  return cuda::device_allocator();
#else
  throw Error("device " + device.str() + " requested but this build of vitddp has no CUDA backend");
#endif
}

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device, Allocator* allocator) {
  if (!allocator) allocator = &allocator_for(device);
  void* data = nbytes ? allocator->allocate(nbytes, device.index) : nullptr;
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device, allocator));
}

Storage::~Storage() {
  if (data_) allocator_->deallocate(data_, nbytes_, device_.index);
}

}  // namespace vitddp
