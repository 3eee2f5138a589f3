// Tuned choices that must be the same from run to run: opaque 64-byte records (a cuBLASLt
// algorithm) keyed by a description of the problem they were tuned for, kept in a small JSON
// file tied to one context (GPU model and library version). A run that tunes writes what it
// chose; later runs read it and make the same choices, so their results repeat bit for bit.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

namespace vitddp {

class AlgorithmCache {
 public:
  using Record = std::array<uint64_t, 8>;

  explicit AlgorithmCache(std::string context) : context_(std::move(context)) {}

  // Reads `path`. Returns "" when the entries were taken (a missing file is an empty cache);
  // otherwise why the file was set aside (unreadable, malformed, or made for another context),
  // leaving the cache empty. Never throws for the file's content.
  std::string load(const std::string& path);
  // Crash-safe write of every entry (framework/io/atomic_file.h); throws vitddp::Error.
  void save(const std::string& path) const;

  bool find(const std::string& key, Record* out) const;
  void put(const std::string& key, const Record& record) { entries_[key] = record; }
  size_t size() const { return entries_.size(); }
  const std::string& context() const { return context_; }

 private:
  std::string context_;
  std::map<std::string, Record> entries_;
};

}  // namespace vitddp
