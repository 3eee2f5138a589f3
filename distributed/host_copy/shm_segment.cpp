#include "distributed/host_copy/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "framework/core/error.h"

namespace vitddp::host_copy {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

// Closes the descriptor on every path; the mapping outlives it.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void* map_shared(int fd, size_t bytes, const std::string& name) {
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED)
    throw Error(detail::concat("cannot map shared memory '", name, "' (", bytes, " bytes): ", errno_text(errno)));
  return data;
}

}  // namespace

ShmSegment ShmSegment::create(const std::string& name, size_t bytes) {
  VITDDP_CHECK(bytes > 0, "ShmSegment: a segment needs at least one byte");
  Fd fd{::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600)};
  if (fd.fd < 0)
    throw Error(detail::concat("cannot create shared memory '", name, "': ", errno_text(errno),
                               errno == EEXIST ? " (left by an earlier run? remove it from /dev/shm)" : ""));
  ShmSegment segment;
  segment.name_ = name;
  segment.owns_name_ = true;
  // posix_fallocate reserves the pages now: a full /dev/shm fails here, not as a SIGBUS later.
  const int err = ::posix_fallocate(fd.fd, 0, static_cast<off_t>(bytes));
  if (err != 0)
    throw Error(detail::concat("cannot reserve ", bytes, " bytes of shared memory for '", name, "': ", errno_text(err),
                               err == ENOSPC ? " (/dev/shm is too small; in a container, raise --shm-size)" : ""));
  segment.data_ = map_shared(fd.fd, bytes, name);
  segment.size_ = bytes;
  return segment;
}

ShmSegment ShmSegment::open(const std::string& name, size_t bytes) {
  Fd fd{::shm_open(name.c_str(), O_RDWR, 0600)};
  if (fd.fd < 0)
    throw Error(detail::concat("cannot open shared memory '", name, "': ", errno_text(errno),
                               " (does every rank run on this host?)"));
  struct stat st;
  if (::fstat(fd.fd, &st) != 0)
    throw Error(detail::concat("cannot stat shared memory '", name, "': ", errno_text(errno)));
  VITDDP_CHECK(static_cast<size_t>(st.st_size) == bytes, "shared memory '", name, "' holds ", st.st_size,
               " bytes, expected ", bytes, " (do the ranks run the same build and settings?)");
  ShmSegment segment;
  segment.name_ = name;
  segment.data_ = map_shared(fd.fd, bytes, name);
  segment.size_ = bytes;
  return segment;
}

ShmSegment::~ShmSegment() { release(); }

ShmSegment::ShmSegment(ShmSegment&& o) noexcept
    : name_(std::move(o.name_)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      owns_name_(std::exchange(o.owns_name_, false)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    release();
    name_ = std::move(o.name_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    owns_name_ = std::exchange(o.owns_name_, false);
  }
  return *this;
}

void ShmSegment::unlink() noexcept {
  if (owns_name_) ::shm_unlink(name_.c_str());
  owns_name_ = false;
}

void ShmSegment::release() noexcept {
  unlink();
  if (data_) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace vitddp::host_copy
