#include "framework/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "framework/core/error.h"

namespace vitddp {
namespace {

std::string directory_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("cannot write " + path_ + ": " + std::strerror(errno));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  ::unlink(tmp_.c_str());
}

void AtomicFileWriter::fail(int err) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  committed_ = true;  // nothing left to clean up
  throw Error("cannot write " + path_ + ": " + std::strerror(err));
}

void AtomicFileWriter::write(const void* data, size_t n) {
  VITDDP_ASSERT(fd_ >= 0 && !committed_, "AtomicFileWriter::write after commit");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicFileWriter::commit() {
  VITDDP_ASSERT(fd_ >= 0 && !committed_, "AtomicFileWriter::commit twice");
  if (::fsync(fd_) != 0) fail(errno);
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) fail(errno);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail(errno);
  committed_ = true;
  // Make the rename durable. Some file systems cannot fsync a directory (EINVAL): that is fine.
  int dir = ::open(directory_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    int sync_rc = ::fsync(dir);
    int err = errno;
    ::close(dir);
    if (sync_rc != 0 && err != EINVAL && err != EROFS)
      throw Error("cannot write " + path_ + ": fsync of its directory failed: " + std::strerror(err));
  }
}

void write_file_atomically(const std::string& path, const std::string& text) {
  AtomicFileWriter writer(path);
  writer.write(text.data(), text.size());
  writer.commit();
}

}  // namespace vitddp
