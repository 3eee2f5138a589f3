// Small POSIX file-system helpers that know nothing of what the files hold: paths, folders,
// reading a bounded text file, and the CRC-32 that tells a damaged file from a whole one
// (Note [Checkpoint checksum]). Crash-safe replacement of a file is atomic_file.h's; these are
// the pieces around it (creating the folder, making a rename or unlink durable, listing and
// checking what is there). Every failure is a vitddp::Error of one line starting with the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace vitddp {

// CRC-32 (the value of zlib's crc32() and Python's zlib.crc32) of `n` bytes, continuing from
// `crc` (0 to start); and of a whole file.
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);
uint32_t file_crc32(const std::string& path);

// `v` as 8 lowercase hex digits: the form a CRC-32 is written in.
std::string hex32(uint32_t v);

// strerror(err).
std::string errno_text(int err);

// `a`/`b`, with one slash between them; `b` alone when `a` is empty.
std::string join_path(const std::string& a, const std::string& b);
// The last component of `path` and the folder holding it ("." when there is none), trailing
// slashes ignored.
std::string base_name(std::string path);
std::string parent_of(std::string path);

bool exists(const std::string& path);
bool is_directory(const std::string& path);
// Creates `path` and its missing parents (mode 0755); a folder already there is fine.
void make_directories(const std::string& path);
// Makes renames and unlinks in `dir` durable. A file system that cannot fsync a folder (EINVAL,
// EROFS) is fine.
void fsync_directory(const std::string& dir);
// The names in `dir` but "." and "..", sorted; none when it cannot be opened.
std::vector<std::string> list_directory(const std::string& dir);

// The content of the regular file `path`. A file over `max_bytes` is refused without being read,
// "<path>: <size> bytes is too large for <what>", so a hostile file cannot make it allocate.
std::string read_text(const std::string& path, uint64_t max_bytes, const std::string& what);
uint64_t file_size(const std::string& path);

}  // namespace vitddp
