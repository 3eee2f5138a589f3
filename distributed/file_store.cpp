#include "distributed/file_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "framework/core/error.h"

namespace vitddp {
namespace {

constexpr std::chrono::milliseconds kPollInterval{10};

std::string errno_text() { return std::strerror(errno); }

// Note [Key file names]
// Keys may hold any byte ('/', spaces, ...). Letters, digits, '-' and '_' are kept; every other
// byte becomes %XX, so the mapping is one to one and never yields "..", a path separator or a
// leading '.', which is reserved for the temporary files of set().
std::string sanitise(const std::string& key) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  out.reserve(key.size());
  for (unsigned char c : key) {
    bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                c == '_';
    if (keep) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out.empty() ? std::string("%") : out;
}

void write_all(int fd, const std::string& value, const std::string& path) {
  size_t written = 0;
  while (written < value.size()) {
    ssize_t n = ::write(fd, value.data() + written, value.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("FileStore: cannot write '" + path + "': " + errno_text());
    written += static_cast<size_t>(n);
  }
}

}  // namespace

FileStore::FileStore(std::string folder) : folder_(std::move(folder)) {
  VITDDP_CHECK(!folder_.empty(), "FileStore: the rendezvous folder is empty");
  std::error_code ec;
  VITDDP_CHECK(!std::filesystem::exists(folder_, ec) || std::filesystem::is_directory(folder_, ec),
               "FileStore: the rendezvous path '", folder_, "' exists and is not a folder");
  std::filesystem::create_directories(folder_, ec);
  VITDDP_CHECK(!ec, "FileStore: cannot create the rendezvous folder '", folder_, "': ", ec.message());
  VITDDP_CHECK(::access(folder_.c_str(), W_OK | X_OK) == 0, "FileStore: the rendezvous folder '", folder_,
               "' is not writable: ", errno_text());
}

std::string FileStore::path_of(const std::string& key) const { return folder_ + "/" + sanitise(key); }

std::string FileStore::write_temporary(const std::string& key, const std::string& value) const {
  static std::atomic<uint64_t> counter{0};
  // The temporary name is unique per process and call, so concurrent writers never share one.
  const std::string tmp = folder_ + "/.tmp." + sanitise(key) + "." + std::to_string(::getpid()) + "." +
                          std::to_string(counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw Error("FileStore: cannot create '" + tmp + "' for key '" + key + "': " + errno_text() +
                " (is the rendezvous folder writable?)");
  }
  try {
    write_all(fd, value, tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw Error("FileStore: cannot write '" + tmp + "': " + why);
  }
  return tmp;
}

void FileStore::set(const std::string& key, const std::string& value) {
  const std::string path = path_of(key);
  const std::string tmp = write_temporary(key, value);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw Error("FileStore: cannot rename '" + tmp + "' to '" + path + "': " + why);
  }
}

bool FileStore::claim(const std::string& key, const std::string& value) {
  const std::string path = path_of(key);
  const std::string tmp = write_temporary(key, value);
  // link() fails with EEXIST when the key exists, atomically, on local and network file systems
  // alike, where rename() would replace it.
  const int linked = ::link(tmp.c_str(), path.c_str());
  const int link_errno = errno;
  ::unlink(tmp.c_str());
  if (linked == 0) return true;
  if (link_errno == EEXIST) return false;
  throw Error("FileStore: cannot create '" + path + "' for key '" + key + "': " + std::strerror(link_errno));
}

bool FileStore::has(const std::string& key) const {
  struct stat st;
  return ::stat(path_of(key).c_str(), &st) == 0;
}

std::string FileStore::get(const std::string& key, std::chrono::milliseconds timeout) const {
  const std::string path = path_of(key);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::ostringstream contents;
      contents << in.rdbuf();
      VITDDP_CHECK(!in.bad(), "FileStore: cannot read '", path, "' (key '", key, "')");
      return contents.str();
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      throw Error(detail::concat("FileStore: timed out after ", timeout.count(), " ms waiting for key '", key,
                                 "' in folder '", folder_,
                                 "': another rank has not written it (did every rank start, with the same "
                                 "rendezvous folder?)"),
                  ErrorKind::kTimeout);
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

}  // namespace vitddp
