#include "framework/io/algorithm_cache.h"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "framework/io/atomic_file.h"

namespace vitddp {
namespace {

constexpr int kFormatVersion = 1;

// Records as 16-digit hex words: JSON numbers above 2^53 do not survive every reader.
std::string hex_word(uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(v));
  return text;
}

bool parse_hex_word(const std::string& text, uint64_t* out) {
  if (text.size() != 16) return false;
  uint64_t v = 0;
  for (char c : text) {
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

}  // namespace

std::string AlgorithmCache::load(const std::string& path) {
  entries_.clear();
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";  // nothing tuned yet
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return path + " is not a JSON object";
  if (!doc.contains("version") || !doc["version"].is_number_integer() || doc["version"] != kFormatVersion)
    return path + " has another format version";
  if (!doc.contains("context") || !doc["context"].is_string() || doc["context"] != context_)
    return path + " was made for another GPU or library version";
  if (!doc.contains("algorithms") || !doc["algorithms"].is_object()) return path + " has no \"algorithms\" object";
  std::map<std::string, Record> entries;
  for (const auto& [key, words] : doc["algorithms"].items()) {
    if (!words.is_array() || words.size() != 8) return path + ": entry \"" + key + "\" is not 8 words";
    Record r{};
    for (size_t i = 0; i < 8; ++i)
      if (!words[i].is_string() || !parse_hex_word(words[i].get<std::string>(), &r[i]))
        return path + ": entry \"" + key + "\" has a word that is not 16 hex digits";
    entries[key] = r;
  }
  entries_ = std::move(entries);
  return "";
}

void AlgorithmCache::save(const std::string& path) const {
  nlohmann::json algorithms = nlohmann::json::object();
  for (const auto& [key, r] : entries_) {
    nlohmann::json words = nlohmann::json::array();
    for (uint64_t v : r) words.push_back(hex_word(v));
    algorithms[key] = std::move(words);
  }
  nlohmann::json doc = {{"version", kFormatVersion}, {"context", context_}, {"algorithms", std::move(algorithms)}};
  write_file_atomically(path, doc.dump(1) + "\n");
}

bool AlgorithmCache::find(const std::string& key, Record* out) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  *out = it->second;
  return true;
}

}  // namespace vitddp
