// Crash-safe replacement of a file: the bytes go to "<path>.tmp.<pid>", which is fsync'ed and
// renamed over `path` on commit(), then the directory is fsync'ed. Readers see either the old
// file or the complete new one; a writer destroyed before commit() removes its temporary file.
#pragma once

#include <cstddef>
#include <string>

namespace vitddp {

class AtomicFileWriter {
 public:
  // Throws vitddp::Error("cannot write <path>: ...") here and in write() and commit().
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t n);
  void commit();
  const std::string& tmp_path() const { return tmp_; }

 private:
  [[noreturn]] void fail(int err);
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// The whole of `text` as the new content of `path`, through AtomicFileWriter.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace vitddp
