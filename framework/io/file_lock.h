// An exclusive advisory lock (flock) on "<path>", held for the object's life, so that processes
// sharing a file (ranks, or jobs, writing one cache) take turns between reading and writing it.
#pragma once

#include <string>

namespace vitddp {

class FileLock {
 public:
  // Blocks until the lock is held; when the lock file cannot be opened or locked, held() is
  // false and the caller goes on unlocked.
  explicit FileLock(const std::string& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace vitddp
