// Storage: one allocation on one device, shared by every tensor (and view) over it.
// Allocation goes through the device's Allocator; see allocator.h.
#pragma once

#include <cstddef>
#include <memory>

#include "framework/core/dtype.h"

namespace vitddp {

class Allocator;

class Storage {
 public:
  // Zero bytes is allowed (empty tensors): data() is then null. `allocator` defaults to the
  // device's (allocator_for); pinned host memory passes its own.
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device, Allocator* allocator = nullptr);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  Storage(void* data, size_t nbytes, Device device, Allocator* allocator)
      : data_(data), nbytes_(nbytes), device_(device), allocator_(allocator) {}
  void* data_;
  size_t nbytes_;
  Device device_;
  Allocator* allocator_;
};

}  // namespace vitddp
