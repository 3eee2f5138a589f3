// FileStore: a rendezvous key-value store in a folder every rank can reach (a local temporary
// folder for one machine, a shared file system for several). Values are written to a temporary
// file and renamed into place, so a reader sees a whole value or none.
#pragma once

#include <chrono>
#include <string>

namespace vitddp {

class FileStore {
 public:
  // Creates the folder if needed.
  explicit FileStore(std::string folder);
  void set(const std::string& key, const std::string& value);
  // Waits until `key` exists; throws (ErrorKind::kTimeout) naming the key after `timeout`.
  std::string get(const std::string& key, std::chrono::milliseconds timeout) const;
  bool has(const std::string& key) const;
  const std::string& folder() const { return folder_; }

 private:
  std::string path_of(const std::string& key) const;
  std::string folder_;
};

}  // namespace vitddp
