#include "framework/io/file_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "framework/core/error.h"

namespace vitddp {

namespace {

// ---------------------------------------------------------------------------------------------
// CRC-32, slicing by 8 (see Note [Checkpoint checksum])

struct Crc32Tables {
  uint32_t t[8][256];
  Crc32Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  }
};

const Crc32Tables& crc_tables() {
  static const Crc32Tables tables;
  return tables;
}

// A file opened for reading, closed when it goes out of scope; throws naming the path.
class ReadFd {
 public:
  explicit ReadFd(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) throw Error(path + ": cannot read: " + errno_text(errno));
  }
  ~ReadFd() { ::close(fd_); }
  ReadFd(const ReadFd&) = delete;
  ReadFd& operator=(const ReadFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

// Note [Checkpoint checksum]
// CRC-32 (the IEEE polynomial, reflected: the value of zlib's crc32(), Python's zlib.crc32 and
// the `crc32` tool) detects every burst error up to 32 bits and random damage with probability
// 1 - 2^-32: enough to tell a damaged file from a whole one (it is no defence against
// tampering, which is not the threat). It is computed here, slicing by 8 (eight table lookups
// per 8 bytes instead of a dependent lookup per byte, so checking a checkpoint costs little
// next to reading it), rather than with zlib, so the build needs no library the GPU machine
// might lack (it has no package registry, and zlib1g-dev's libz.so is an absolute link that
// does not survive unpacking into .deps/).
uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  const auto& t = crc_tables().t;
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^ t[3][hi & 0xff] ^
        t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) c = t[0][(c ^ *p++) & 0xff] ^ (c >> 8);
  return ~c;
}

uint32_t file_crc32(const std::string& path) {
  const ReadFd file(path);
  const int fd = file.get();
  std::vector<char> buf(size_t{4} << 20);
  uint32_t crc = 0;
  for (;;) {
    ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw Error(path + ": cannot read: " + errno_text(errno));
    if (r == 0) break;
    crc = crc32(buf.data(), static_cast<size_t>(r), crc);
  }
  return crc;
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

std::string errno_text(int err) { return std::strerror(err); }

std::string join_path(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  return a.back() == '/' ? a + b : a + "/" + b;
}

std::string base_name(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string parent_of(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void make_directories(const std::string& path) {
  if (path.empty() || is_directory(path)) return;
  make_directories(parent_of(path));
  // EEXIST: another process made it between the check and the mkdir.
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
    throw Error(path + ": cannot create folder: " + errno_text(errno));
}

void fsync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error(dir + ": cannot open: " + errno_text(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL && err != EROFS) throw Error(dir + ": cannot fsync: " + errno_text(err));
}

std::vector<std::string> list_directory(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());  // readdir's order is the file system's, not stable
  return names;
}

std::string read_text(const std::string& path, uint64_t max_bytes, const std::string& what) {
  const ReadFd file(path);
  const int fd = file.get();
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) throw Error(path + ": cannot read: not a regular file");
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    throw Error(path + ": " + std::to_string(st.st_size) + " bytes is too large for " + what);
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t at = 0;
  while (at < text.size()) {
    ssize_t r = ::read(fd, text.data() + at, text.size() - at);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw Error(path + ": cannot read: " + errno_text(errno));
    if (r == 0) break;  // the file shrank since fstat: return what is there
    at += static_cast<size_t>(r);
  }
  text.resize(at);
  return text;
}

uint64_t file_size(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw Error(path + ": cannot read: " + errno_text(errno));
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace vitddp
