// ShmSegment: one POSIX shared-memory segment (/dev/shm), mapped into this process; move-only.
// The host-copy all-reduce's rings live in one per rank (distributed/nccl/host_copy_transport.h).
// The creator reserves the segment's pages up front, so a /dev/shm too small for it (a
// container's default 64 MB) is one clear error here, not a SIGBUS at the first copy.
#pragma once

#include <cstddef>
#include <string>

namespace vitddp::host_copy {

class ShmSegment {
 public:
  ShmSegment() = default;
  // A new segment of `bytes` (zero-filled) named `name` ("/vitddp-..."); throws (ErrorKind::kUser)
  // when the name exists or /dev/shm cannot hold it. The name stays until unlink() or the destructor.
  static ShmSegment create(const std::string& name, size_t bytes);
  // Maps an existing segment; throws when it is missing or not `bytes` long.
  static ShmSegment open(const std::string& name, size_t bytes);
  ~ShmSegment();
  ShmSegment(ShmSegment&& o) noexcept;
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  // Removes the name (a created segment's); the mapping stays until the destructor.
  void unlink() noexcept;

 private:
  void release() noexcept;
  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool owns_name_ = false;
};

}  // namespace vitddp::host_copy
