// FileStore: a rendezvous key-value store in a folder every rank can reach (a local temporary
// folder for one machine, a shared file system for several). Values are written to a temporary
// file and renamed into place, so a reader sees a whole value or none. Keys may hold any
// characters (they are escaped into file names). Nothing is ever deleted: use a fresh folder per
// run, or a rank may read a value an earlier run left behind.
#pragma once

#include <chrono>
#include <string>

namespace vitddp {

class FileStore {
 public:
  // Creates the folder if needed; throws (ErrorKind::kUser) naming it when it cannot be created
  // or written.
  explicit FileStore(std::string folder);
  void set(const std::string& key, const std::string& value);
  // Sets `key` only if no one has: true for the one caller, of any process, that set it.
  bool claim(const std::string& key, const std::string& value);
  // Waits (polling every 10 ms) until `key` exists; throws (ErrorKind::kTimeout) naming the key
  // and the folder after `timeout`.
  std::string get(const std::string& key, std::chrono::milliseconds timeout) const;
  bool has(const std::string& key) const;
  const std::string& folder() const { return folder_; }

 private:
  std::string path_of(const std::string& key) const;
  // A whole value in a fresh temporary file of the folder; returns its path.
  std::string write_temporary(const std::string& key, const std::string& value) const;
  std::string folder_;
};

}  // namespace vitddp
