// Checkpoint files: writing them crash-safely, finding the newest whole one, and reading one
// back with every field checked. The layout and the record are described in checkpoint.h.
#include "framework/core/message_text.h"
#include "train/checkpoint/checkpoint.h"

#include "train/config.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <ostream>
#include <set>
#include <thread>

#include "framework/core/error.h"
#include "framework/io/atomic_file.h"

namespace vitddp {

namespace {

std::string quote(const std::string& text, size_t max_len = 80) { return quote_for_message(text, max_len); }
std::string sanitize(const std::string& text, size_t max_len = 200) { return sanitize_for_message(text, max_len); }

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr const char* kFormat = "vitddp-checkpoint";
constexpr int kVersion = 1;
constexpr uint64_t kMaxRecordBytes = 64ull << 20;  // a record is a few KB; refuse absurd files
constexpr const char* kWeightsPrefix = "weights.";
constexpr const char* kOptimPrefix = "optim.";
constexpr const char* kPowerSgdPrefix = "powersgd.b";

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

// ---------------------------------------------------------------------------------------------
// Small file-system helpers

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

// Creates `path` and its missing parents.
void make_directories(const std::string& path) {
  if (path.empty() || is_directory(path)) return;
  make_directories(parent_of(path));
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
    throw Error(path + ": cannot create folder: " + errno_text(errno));
}

// Makes renames and unlinks in `dir` durable. Some file systems cannot fsync a directory
// (EINVAL): that is fine.
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
  std::sort(names.begin(), names.end());
  return names;
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

std::string read_text(const std::string& path, uint64_t max_bytes) {
  const ReadFd file(path);
  const int fd = file.get();
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) throw Error(path + ": cannot read: not a regular file");
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    throw Error(path + ": " + std::to_string(st.st_size) + " bytes is too large for a checkpoint record");
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t at = 0;
  while (at < text.size()) {
    ssize_t r = ::read(fd, text.data() + at, text.size() - at);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw Error(path + ": cannot read: " + errno_text(errno));
    if (r == 0) break;
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

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}



// ---------------------------------------------------------------------------------------------
// Names

std::string rank_file(int rank, const char* extension) { return "rank-" + std::to_string(rank) + extension; }

// The step of a folder called "step-<digits>", or -1.
int64_t parse_step_name(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5 || name.size() > 5 + 18) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// Step folders under `dir`, newest first.
std::vector<std::pair<int64_t, std::string>> step_folders(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> steps;
  for (const std::string& name : list_directory(dir)) {
    int64_t step = parse_step_name(name);
    if (step >= 0 && is_directory(join_path(dir, name))) steps.emplace_back(step, join_path(dir, name));
  }
  std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return steps;
}

// Names, shapes and dtypes of the weights, hashed: a quick fingerprint of the architecture.
std::string parameter_signature(const NamedTensors& weights) {
  std::string text;
  for (const auto& [name, t] : weights)
    text += name + ":" + safetensors_dtype_name(t.dtype()) + shape_str(t.shape()) + ";";
  return "crc32:" + hex32(crc32(text.data(), text.size())) + ":" + std::to_string(weights.size());
}

// ---------------------------------------------------------------------------------------------
// The record (rank-R.json)

struct Record {
  int64_t step = 0;
  int rank = 0;
  int world_size = 1;
  std::string model_name;
  int64_t parameter_count = 0;
  std::string param_signature;
  std::string optimizer_name;
  int64_t optimizer_steps = 0;
  uint64_t dropout_seed = 0, dropout_counter = 0;
  int64_t loader_step = 0;
  bool has_powersgd = false;
  int64_t powersgd_iter = 0;
  struct PsgdBucket {
    size_t index = 0;
    bool error = false, q = false, sent_p = false;  // sent_p: optional key (older records lack it)
  };
  std::vector<PsgdBucket> powersgd_buckets;
  std::vector<std::vector<size_t>> buckets;  // optional key "buckets"
  json config;
  std::string tensors_file;
  uint64_t tensors_bytes = 0;
  std::string tensors_crc32;
};

// Strict reading of one JSON record: every field present with its type, no key unknown.
class RecordReader {
 public:
  explicit RecordReader(const std::string& path) : path_(path) {}

  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) const {
    throw Error(path_ + ": " + detail::concat(args...));
  }

  static std::string field(const std::string& where, const std::string& key) {
    return where.empty() ? key : where + "." + key;
  }

  // `obj` must be an object with exactly `keys`, plus any of `optional`.
  void exact_keys(const json& obj, const std::string& where, const std::vector<std::string>& keys,
                  const std::vector<std::string>& optional = {}) const {
    if (!obj.is_object())
      fail(where.empty() ? "the record" : "'" + where + "'", " must be a JSON object, got ", obj.type_name());
    for (const auto& item : obj.items())
      if (std::find(keys.begin(), keys.end(), item.key()) == keys.end() &&
          std::find(optional.begin(), optional.end(), item.key()) == optional.end())
        fail("unknown key ", quote(field(where, item.key())), " in the record (written by another version?)");
    for (const std::string& key : keys)
      if (!obj.contains(key)) fail("missing field '", field(where, key), "' in the record");
  }

  int64_t integer(const json& obj, const std::string& where, const std::string& key, int64_t min) const {
    const json& v = obj.at(key);
    if (!v.is_number_integer())
      fail("field '", field(where, key), "' must be an integer, got ", v.type_name(), " ", sanitize(v.dump(), 40));
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail("field '", field(where, key), "' is out of range: ", v.dump());
    int64_t x = v.get<int64_t>();
    if (x < min) fail("field '", field(where, key), "' must be >= ", min, ", got ", x);
    return x;
  }

  uint64_t unsigned64(const json& obj, const std::string& where, const std::string& key) const {
    const json& v = obj.at(key);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      fail("field '", field(where, key), "' must be an unsigned integer, got ", v.type_name(), " ",
           sanitize(v.dump(), 40));
    return v.get<uint64_t>();
  }

  std::string string(const json& obj, const std::string& where, const std::string& key) const {
    const json& v = obj.at(key);
    if (!v.is_string()) fail("field '", field(where, key), "' must be a string, got ", v.type_name());
    return v.get<std::string>();
  }

  bool boolean(const json& obj, const std::string& where, const std::string& key) const {
    const json& v = obj.at(key);
    if (!v.is_boolean()) fail("field '", field(where, key), "' must be true or false, got ", v.type_name());
    return v.get<bool>();
  }

 private:
  const std::string& path_;
};

// `label` (the file's path) starts every error message.
Record parse_record_text(const std::string& text, const std::string& label) {
  RecordReader r(label);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    r.fail("malformed JSON (", text.empty() ? "empty file" : sanitize(e.what()), ")");
  }
  r.exact_keys(j, "",
               {"format", "version", "step", "rank", "world_size", "model", "optimizer", "rng", "loader_step",
                "powersgd", "config", "tensors", "complete"},
               {"buckets"});
  if (r.string(j, "", "format") != kFormat)
    r.fail("field 'format' is ", quote(j["format"].get<std::string>()), ", expected '", kFormat, "'");
  int64_t version = r.integer(j, "", "version", 0);
  if (version != kVersion) r.fail("record version ", version, " is not supported (this build reads ", kVersion, ")");
  if (!r.boolean(j, "", "complete")) r.fail("record is marked incomplete");

  Record rec;
  rec.step = r.integer(j, "", "step", 0);
  rec.rank = static_cast<int>(std::min<int64_t>(r.integer(j, "", "rank", 0), INT32_MAX));
  rec.world_size = static_cast<int>(std::min<int64_t>(r.integer(j, "", "world_size", 1), INT32_MAX));
  if (rec.rank >= rec.world_size) r.fail("field 'rank' ", rec.rank, " is not below 'world_size' ", rec.world_size);

  const json& model = j["model"];
  r.exact_keys(model, "model", {"name", "parameter_count", "param_signature"});
  rec.model_name = r.string(model, "model", "name");
  rec.parameter_count = r.integer(model, "model", "parameter_count", 0);
  rec.param_signature = r.string(model, "model", "param_signature");

  const json& optimizer = j["optimizer"];
  r.exact_keys(optimizer, "optimizer", {"name", "steps"});
  rec.optimizer_name = r.string(optimizer, "optimizer", "name");
  rec.optimizer_steps = r.integer(optimizer, "optimizer", "steps", 0);

  const json& rng = j["rng"];
  r.exact_keys(rng, "rng", {"dropout"});
  r.exact_keys(rng["dropout"], "rng.dropout", {"seed", "counter"});
  rec.dropout_seed = r.unsigned64(rng["dropout"], "rng.dropout", "seed");
  rec.dropout_counter = r.unsigned64(rng["dropout"], "rng.dropout", "counter");

  rec.loader_step = r.integer(j, "", "loader_step", 0);
  // A count of batches: far below INT64_MAX, whose neighbourhood would overflow the loader's claims.
  if (rec.loader_step > (int64_t{1} << 53)) r.fail("field 'loader_step' is out of range: ", rec.loader_step);

  const json& psgd = j["powersgd"];
  if (!psgd.is_null()) {
    rec.has_powersgd = true;
    r.exact_keys(psgd, "powersgd", {"iter", "buckets"});
    rec.powersgd_iter = r.integer(psgd, "powersgd", "iter", 0);
    if (!psgd["buckets"].is_array())
      r.fail("field 'powersgd.buckets' must be an array, got ", psgd["buckets"].type_name());
    std::set<size_t> seen;
    for (size_t i = 0; i < psgd["buckets"].size(); ++i) {
      const std::string where = "powersgd.buckets[" + std::to_string(i) + "]";
      const json& b = psgd["buckets"][i];
      r.exact_keys(b, where, {"index", "error", "q"}, {"sent_p"});
      Record::PsgdBucket bucket;
      bucket.index = static_cast<size_t>(r.integer(b, where, "index", 0));
      bucket.error = r.boolean(b, where, "error");
      bucket.q = r.boolean(b, where, "q");
      if (b.contains("sent_p")) bucket.sent_p = r.boolean(b, where, "sent_p");
      // The sent P is subtracted with Q from the stored M: without both it would mean nothing.
      if (bucket.sent_p && !(bucket.error && bucket.q))
        r.fail("PowerSGD bucket ", bucket.index, " lists a sent P without its error and Q");
      if (!seen.insert(bucket.index).second) r.fail("PowerSGD bucket ", bucket.index, " is listed twice");
      rec.powersgd_buckets.push_back(bucket);
    }
  }

  if (j.contains("buckets")) {  // optional: records of single-process runs have none
    const json& buckets = j["buckets"];
    if (!buckets.is_array()) r.fail("field 'buckets' must be an array, got ", buckets.type_name());
    for (size_t b = 0; b < buckets.size(); ++b) {
      if (!buckets[b].is_array() || buckets[b].empty())
        r.fail("field 'buckets[", b, "]' must be a non-empty array of parameter indices");
      std::vector<size_t> params;
      for (const json& v : buckets[b]) {
        if (!v.is_number_unsigned()) r.fail("field 'buckets[", b, "]' holds ", v.dump(), ", not a parameter index");
        params.push_back(v.get<size_t>());
      }
      rec.buckets.push_back(std::move(params));
    }
  }

  if (!j["config"].is_object()) r.fail("field 'config' must be a JSON object, got ", j["config"].type_name());
  rec.config = j["config"];

  const json& tensors = j["tensors"];
  r.exact_keys(tensors, "tensors", {"file", "bytes", "crc32"});
  rec.tensors_file = r.string(tensors, "tensors", "file");
  rec.tensors_bytes = static_cast<uint64_t>(r.integer(tensors, "tensors", "bytes", 0));
  rec.tensors_crc32 = r.string(tensors, "tensors", "crc32");
  if (rec.tensors_crc32.size() != 8 || rec.tensors_crc32.find_first_not_of("0123456789abcdef") != std::string::npos)
    r.fail("field 'tensors.crc32' must be 8 lowercase hex digits, got ", quote(rec.tensors_crc32));
  if (rec.tensors_file != rank_file(rec.rank, ".safetensors"))
    r.fail("field 'tensors.file' is ", quote(rec.tensors_file), ", expected '", rank_file(rec.rank, ".safetensors"),
           "'");
  return rec;
}

Record parse_record(const std::string& path) { return parse_record_text(read_text(path, kMaxRecordBytes), path); }

std::string record_text(const CheckpointState& s, const std::string& tensors_file, uint64_t bytes, uint32_t crc) {
  ojson j = ojson::object();
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["step"] = s.step;
  j["rank"] = s.rank;
  j["world_size"] = s.world_size;
  j["model"] = {{"name", s.model_name},
                {"parameter_count", s.parameter_count},
                {"param_signature", parameter_signature(s.weights)}};
  j["optimizer"] = {{"name", s.optimizer_name}, {"steps", s.optimizer_steps}};
  j["rng"] = {{"dropout", {{"seed", s.dropout_seed}, {"counter", s.dropout_counter}}}};
  j["loader_step"] = s.loader_step;
  if (!s.buckets.empty()) j["buckets"] = s.buckets;
  if (s.powersgd) {
    ojson buckets = ojson::array();
    for (const auto& [index, b] : s.powersgd->buckets)
      buckets.push_back(
          {{"index", index}, {"error", b.error.defined()}, {"q", b.q.defined()}, {"sent_p", b.sent_p.defined()}});
    j["powersgd"] = {{"iter", s.powersgd->iter}, {"buckets", std::move(buckets)}};
  } else {
    j["powersgd"] = nullptr;
  }
  j["config"] = s.config.is_object() ? ojson::parse(s.config.dump()) : ojson::object();
  j["tensors"] = {{"file", tensors_file}, {"bytes", bytes}, {"crc32", hex32(crc)}};
  j["complete"] = true;  // last, by convention; the record is only ever renamed into place whole
  return j.dump(2) + "\n";
}

// ---------------------------------------------------------------------------------------------
// Saving

std::string powersgd_name(size_t index, const char* part) {
  return kPowerSgdPrefix + std::to_string(index) + "." + part;
}

NamedTensors checkpoint_tensors(const CheckpointState& s) {
  NamedTensors out;
  for (const auto& [name, t] : s.weights) out.emplace_back(kWeightsPrefix + name, t);
  for (const auto& [name, t] : s.optimizer_state) out.emplace_back(kOptimPrefix + name, t);
  if (s.powersgd)
    for (const auto& [index, b] : s.powersgd->buckets) {
      if (b.error.defined()) out.emplace_back(powersgd_name(index, "error"), b.error);
      if (b.q.defined()) out.emplace_back(powersgd_name(index, "q"), b.q);
      if (b.sent_p.defined()) out.emplace_back(powersgd_name(index, "sent_p"), b.sent_p);
    }
  return out;
}

// VITDDP_TEST_PAUSE_IN_SAVE: unset or "0": never; "step:N": only in the save of step N (so a
// test can let earlier saves finish); anything else: in every save.
bool pause_requested(int64_t step) {
  const char* v = std::getenv("VITDDP_TEST_PAUSE_IN_SAVE");
  if (!v || !*v || std::string(v) == "0") return false;
  const std::string value(v);
  if (value.rfind("step:", 0) == 0) return value.substr(5) == std::to_string(step);
  return true;
}

struct Written {
  uint64_t bytes = 0;
  uint32_t crc = 0;
};

// Streams the tensors into an AtomicFileWriter, computing the size and CRC on the way.
Written write_tensors_file(const std::string& path, const NamedTensors& tensors,
                           const std::map<std::string, std::string>& metadata, bool pause) {
  uint64_t data_bytes = 0;
  for (const auto& [name, t] : tensors) data_bytes += t.nbytes();
  AtomicFileWriter file(path);
  Written w;
  uint32_t crc = 0;
  uint64_t pause_at = UINT64_MAX;  // set once the header's size is known
  stream_safetensors(
      tensors,
      [&](const char* data, size_t n) {
        if (pause && pause_at == UINT64_MAX) pause_at = (n + data_bytes) / 2;
        crc = crc32(data, n, crc);
        if (w.bytes < pause_at && w.bytes + n >= pause_at) {
          const size_t first = static_cast<size_t>(pause_at - w.bytes);
          file.write(data, first);
          std::fprintf(stderr, "VITDDP_TEST_PAUSE_IN_SAVE: paused after %llu of %llu bytes of %s\n",
                       static_cast<unsigned long long>(pause_at), static_cast<unsigned long long>(pause_at * 2),
                       file.tmp_path().c_str());
          std::fflush(stderr);
          std::this_thread::sleep_for(std::chrono::seconds(30));
          file.write(data + first, n - first);
        } else {
          file.write(data, n);
        }
        w.bytes += n;
      },
      metadata);
  file.commit();
  w.crc = crc;
  return w;
}

bool is_temp_of_rank(const std::string& name, int rank) {
  return name.rfind("rank-" + std::to_string(rank) + ".", 0) == 0 && name.find(".tmp.") != std::string::npos;
}

// Whether every rank's record of `step_dir` is present (the step completed everywhere), for
// retention and LATEST; whole-ness proper also checks the CRC (find_latest_checkpoint).
bool all_records_present(const std::string& step_dir, int world_size) {
  for (int r = 0; r < world_size; ++r)
    if (!exists(join_path(step_dir, rank_file(r, ".json")))) return false;
  return true;
}

// Removes this rank's files in `step_dir` (the record first, so a half-removed step is never taken
// for whole), then the folder if that left it empty.
void remove_rank_files(const std::string& step_dir, int rank) {
  ::unlink(join_path(step_dir, rank_file(rank, ".json")).c_str());
  ::unlink(join_path(step_dir, rank_file(rank, ".safetensors")).c_str());
  for (const std::string& name : list_directory(step_dir))
    if (is_temp_of_rank(name, rank)) ::unlink(join_path(step_dir, name).c_str());
  ::rmdir(step_dir.c_str());  // fails while other ranks' files remain: they remove their own
}

// See Note [Checkpoint retention].
void apply_retention(const std::string& dir, int64_t step, int rank, int world_size, int keep) {
  int whole = 0;
  int64_t oldest_kept = -1;
  for (const auto& [s, path] : step_folders(dir)) {
    if (s > step || whole >= keep || !all_records_present(path, world_size)) continue;
    ++whole;
    oldest_kept = s;
  }
  for (const auto& [s, path] : step_folders(dir)) {
    if (s > step || (whole >= keep && s < oldest_kept)) {
      remove_rank_files(path, rank);
    } else {
      for (const std::string& name : list_directory(path))  // temp files of earlier, killed saves
        if (is_temp_of_rank(name, rank)) ::unlink(join_path(path, name).c_str());
    }
  }
  fsync_directory(dir);
}

void update_latest(const std::string& dir, int64_t step, int world_size) {
  for (const auto& [s, path] : step_folders(dir)) {
    if (s > step || !all_records_present(path, world_size)) continue;
    write_file_atomically(join_path(dir, "LATEST"), checkpoint_step_name(s) + "\n");
    return;
  }
}

// ---------------------------------------------------------------------------------------------
// Checking

// Why `rank`'s files in `step_dir` are not a whole checkpoint, or "" when they are.
std::string whole_problem(const std::string& step_dir, int rank) {
  const std::string record_path = join_path(step_dir, rank_file(rank, ".json"));
  try {
    if (!exists(record_path)) {
      // A run with more ranks than the checkpoint: hand the step to load_checkpoint to refuse.
      const std::string first = join_path(step_dir, rank_file(0, ".json"));
      if (rank > 0 && exists(first) && parse_record(first).world_size <= rank) return "";
      return rank_file(rank, ".json") + " is missing (the save did not complete)";
    }
    Record rec = parse_record(record_path);
    for (int r = 0; r < rec.world_size; ++r)
      if (!exists(join_path(step_dir, rank_file(r, ".json"))))
        return rank_file(r, ".json") + " is missing (rank " + std::to_string(r) + "'s save did not complete)";
    const std::string tensors_path = join_path(step_dir, rec.tensors_file);
    if (!exists(tensors_path)) return rec.tensors_file + " is missing";
    const uint64_t size = file_size(tensors_path);
    if (size != rec.tensors_bytes)
      return rec.tensors_file + " is " + std::to_string(size) + " bytes, its record says " +
             std::to_string(rec.tensors_bytes);
    const std::string crc = hex32(file_crc32(tensors_path));
    if (crc != rec.tensors_crc32)
      return rec.tensors_file + " fails its checksum (CRC-32 " + crc + ", the record says " + rec.tensors_crc32 + ")";
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string describe(const Tensor& t) { return std::string(safetensors_dtype_name(t.dtype())) + shape_str(t.shape()); }

// `got` (from the checkpoint) against `want` (this run): the same names, in order, with the same
// shapes and dtypes. Throws naming the differences.
void check_tensors_match(const std::string& path, const char* what, const NamedTensors& got, const NamedTensors& want) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : got) by_name[name] = &t;
  std::vector<std::string> problems;
  std::set<std::string> wanted;
  int missing = 0;
  for (const auto& [name, t] : want) {
    wanted.insert(name);
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      if (missing++ < 3) problems.push_back(std::string(what) + " " + quote(name) + " is missing");
      continue;
    }
    if (it->second->dtype() != t.dtype() || it->second->shape() != t.shape())
      problems.push_back(std::string(what) + " " + quote(name) + " is " + describe(*it->second) +
                         " in the checkpoint but " + describe(t) + " in this run");
  }
  if (missing > 3) problems.push_back(std::to_string(missing - 3) + " more missing");
  int unexpected = 0;
  for (const auto& [name, t] : got)
    if (!wanted.count(name) && unexpected++ < 3)
      problems.push_back("unexpected " + std::string(what) + " " + quote(name) + " (not in this run)");
  if (problems.empty()) return;
  std::string message;
  for (size_t i = 0; i < problems.size() && i < 6; ++i) message += (i ? "; " : "") + problems[i];
  if (problems.size() > 6) message += "; and more";
  throw Error(path + ": " + message);
}

}  // namespace

// Note [Checkpoint write order]
// Each rank writes its tensors file (temp, fsync, rename, fsync folder) and only then its record
// (the same), so a record on disk means the tensors it describes were whole and durable when it
// was written. A crash at any point leaves, at worst, temp files and a tensors file without a
// record in the step being saved: find_latest_checkpoint skips that step and the previous one is
// untouched, because nothing of an older step is deleted until the new step is complete on every
// rank (Note [Checkpoint retention]). Re-saving a step that already has a record removes the
// record first, so the old record never vouches for a new, half-written tensors file. The CRC-32
// in the record catches what the order cannot: later damage (a bit flip, a truncated copy).

// Note [Checkpoint retention]
// A rank deletes only its own files (so ranks never race on a file). After its save of step S it
// keeps the `keep` newest steps <= S whose records are present for every rank, and any step
// newer than the oldest of those; it deletes older steps, and steps > S (a run resumed from an
// earlier step abandons those), and its temp files left by killed saves. A step another rank
// has not finished yet is therefore never the reason an older one goes: with keep = 1 the
// previous step stays until every rank has finished the new one.

std::string checkpoint_step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%06lld", static_cast<long long>(step));
  return buf;
}

// Note [Checkpoint checksum]
// CRC-32 (the IEEE polynomial, reflected: the value of zlib's crc32(), Python's zlib.crc32 and
// the `crc32` tool) detects every burst error up to 32 bits and random damage with probability
// 1 - 2^-32: enough to tell a damaged file from a whole one (it is no defence against
// tampering, which is not the threat). It is computed here, slicing by 8 (about 1.5 GB/s on one
// core), rather than with zlib, so the build needs no library the GPU machine might lack (it
// has no package registry, and zlib1g-dev's libz.so is an absolute link that does not survive
// unpacking into .deps/).
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

int64_t checkpoint_step_of(const std::string& step_dir) { return parse_step_name(base_name(step_dir)); }

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

std::string save_checkpoint(const std::string& dir, const CheckpointState& state, const CheckpointOptions& options) {
  VITDDP_CHECK(!dir.empty(), "save_checkpoint: empty checkpoint folder");
  VITDDP_CHECK(options.keep >= 1, "save_checkpoint: keep must be >= 1, got ", options.keep);
  VITDDP_CHECK(state.step >= 0, "save_checkpoint: step must be >= 0, got ", state.step);
  VITDDP_CHECK(state.world_size >= 1 && state.rank >= 0 && state.rank < state.world_size, "save_checkpoint: rank ",
               state.rank, " of world size ", state.world_size, " is impossible");
  VITDDP_CHECK(state.loader_step >= 0 && state.optimizer_steps >= 0,
               "save_checkpoint: negative loader or optimizer step");
  make_directories(dir);
  const std::string step_dir = join_path(dir, checkpoint_step_name(state.step));
  if (::mkdir(step_dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw Error(step_dir + ": cannot create folder: " + errno_text(errno));
  fsync_directory(dir);

  // See Note [Checkpoint write order].
  const std::string record_path = join_path(step_dir, rank_file(state.rank, ".json"));
  if (exists(record_path)) {
    if (::unlink(record_path.c_str()) != 0) throw Error(record_path + ": cannot replace: " + errno_text(errno));
    fsync_directory(step_dir);
  }
  const std::string tensors_file = rank_file(state.rank, ".safetensors");
  const std::map<std::string, std::string> metadata = {
      {"format", kFormat}, {"step", std::to_string(state.step)}, {"rank", std::to_string(state.rank)}};
  Written w = write_tensors_file(join_path(step_dir, tensors_file), checkpoint_tensors(state), metadata,
                                 pause_requested(state.step));
  write_file_atomically(record_path, record_text(state, tensors_file, w.bytes, w.crc));

  apply_retention(dir, state.step, state.rank, state.world_size, options.keep);
  if (state.rank == 0) update_latest(dir, state.step, state.world_size);
  return step_dir;
}

std::vector<std::string> resume_setting_changes(const nlohmann::json& saved, const nlohmann::json& now) {
  std::vector<std::string> changes;
  for (const char* key : {"seed", "data", "dataset-size", "batch-size", "accumulate", "precision", "image-size",
                          "dropout", "bucket-mb", "first-bucket-mb", "early-bucket-mb", "tail-bucket-mb"}) {
    if (!saved.is_object() || !now.is_object() || !saved.contains(key) || !now.contains(key)) continue;
    if (saved[key] != now[key])
      changes.push_back((is_public_flag(key) ? "--" : "") + std::string(key) + " " + saved[key].dump() + " -> " +
                        now[key].dump());
  }
  return changes;
}

void check_checkpoint_dir(const std::string& dir, bool resume) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  VITDDP_CHECK(!ec && is_directory(dir), "--checkpoint-dir ", dir, ": cannot make the folder (",
               ec ? ec.message() : std::string("a file of that name is in the way"), ")");
  if (resume) return;
  const std::vector<std::pair<int64_t, std::string>> steps = step_folders(dir);
  VITDDP_CHECK(steps.empty(), "--checkpoint-dir ", dir, " already holds checkpoints (newest: step ", steps.front().first,
               "); pass --resume to continue that run, or choose an empty folder: a new run's first save would "
               "delete them");
}

std::optional<std::string> find_latest_checkpoint(const std::string& dir, int rank, std::ostream& log) {
  const auto steps = step_folders(dir);
  if (steps.empty()) return std::nullopt;
  std::string problems;
  for (const auto& [step, path] : steps) {
    std::string problem = whole_problem(path, rank);
    if (problem.empty()) return path;
    // One write: every rank may say it at once on a shared stderr.
    log << ("warning: skipping checkpoint " + path + ": " + problem + "\n") << std::flush;
    problems += (problems.empty() ? "" : "; ") + base_name(path) + ": " + problem;
  }
  throw Error("no whole checkpoint for rank " + std::to_string(rank) + " in " + dir + " (" + problems + ")");
}

CheckpointState load_checkpoint(const std::string& step_dir, int rank, const CheckpointExpectations& expect) {
  const int64_t dir_step = parse_step_name(base_name(step_dir));
  VITDDP_CHECK(dir_step >= 0, step_dir, ": not a checkpoint step folder (expected a name like step-000120)");
  VITDDP_CHECK(is_directory(step_dir), step_dir, ": no such checkpoint folder");
  const std::string record_path = join_path(step_dir, rank_file(rank, ".json"));
  if (!exists(record_path)) {
    // Name the world-size mismatch when that is the reason (a run with more ranks).
    const std::string first = join_path(step_dir, rank_file(0, ".json"));
    if (rank > 0 && exists(first)) {
      Record rec0 = parse_record(first);
      VITDDP_CHECK(rec0.world_size == expect.world_size, first, ": checkpoint was saved by ", rec0.world_size,
                   " ranks, this run has ", expect.world_size, " (resume with the same world size)");
    }
    throw Error(record_path + ": missing: rank " + std::to_string(rank) +
                "'s save of this step did not complete; resume from an earlier step");
  }
  Record rec = parse_record(record_path);
  auto fail = [&](const std::string& path, const std::string& message) { throw Error(path + ": " + message); };
  if (rec.rank != rank)
    fail(record_path, "the record is rank " + std::to_string(rec.rank) + "'s, not rank " + std::to_string(rank) + "'s");
  if (rec.step != dir_step)
    fail(record_path, "the record is of step " + std::to_string(rec.step) + " but lies in " + base_name(step_dir));
  if (rec.model_name != expect.model_name || rec.parameter_count != expect.parameter_count)
    fail(record_path, "checkpoint is " + rec.model_name + " (" + std::to_string(rec.parameter_count) +
                          " parameters), this run is " + expect.model_name + " (" +
                          std::to_string(expect.parameter_count) + ")");
  if (rec.world_size != expect.world_size)
    fail(record_path, "checkpoint was saved by " + std::to_string(rec.world_size) + " ranks, this run has " +
                          std::to_string(expect.world_size) + " (resume with the same world size)");
  for (int r = 0; r < rec.world_size; ++r) {
    const std::string other = join_path(step_dir, rank_file(r, ".json"));
    if (!exists(other))
      fail(other, "missing: rank " + std::to_string(r) +
                      "'s save of this step did not complete; resume from an "
                      "earlier step");
  }
  if (rec.optimizer_name != expect.optimizer_name)
    fail(record_path, "checkpoint's optimizer is " + rec.optimizer_name + ", this run's is " + expect.optimizer_name);
  if (rec.has_powersgd != expect.powersgd)
    fail(record_path, rec.has_powersgd ? "checkpoint holds PowerSGD state but this run's hook is not PowerSGD"
                                       : "checkpoint holds no PowerSGD state but this run's hook is PowerSGD");

  // The tensors file: size, checksum, then the format and every tensor.
  const std::string tensors_path = join_path(step_dir, rec.tensors_file);
  if (!exists(tensors_path)) fail(tensors_path, "missing (its record " + record_path + " is present)");
  const uint64_t size = file_size(tensors_path);
  if (size != rec.tensors_bytes)
    fail(tensors_path, "file is " + std::to_string(size) + " bytes but its record says " +
                           std::to_string(rec.tensors_bytes) + (size < rec.tensors_bytes ? " (truncated)" : ""));
  const std::string crc = hex32(file_crc32(tensors_path));
  if (crc != rec.tensors_crc32)
    fail(tensors_path, "checksum mismatch: CRC-32 is " + crc + " but its record says " + rec.tensors_crc32 +
                           " (the file is damaged)");
  SafetensorsFile file = read_safetensors(tensors_path);

  CheckpointState state;
  state.step = rec.step;
  state.config = rec.config;
  state.model_name = rec.model_name;
  state.parameter_count = rec.parameter_count;
  state.world_size = rec.world_size;
  state.rank = rec.rank;
  state.dropout_seed = rec.dropout_seed;
  state.dropout_counter = rec.dropout_counter;
  state.loader_step = rec.loader_step;
  state.buckets = rec.buckets;
  state.optimizer_name = rec.optimizer_name;
  state.optimizer_steps = rec.optimizer_steps;
  std::map<size_t, Record::PsgdBucket> listed;
  if (rec.has_powersgd) {
    state.powersgd.emplace();
    state.powersgd->iter = rec.powersgd_iter;
    for (const auto& b : rec.powersgd_buckets) {
      listed[b.index] = b;
      state.powersgd->buckets[b.index];
    }
  }
  auto starts_with = [](const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; };
  for (auto& [name, t] : file.tensors) {
    if (starts_with(name, kWeightsPrefix)) {
      state.weights.emplace_back(name.substr(std::strlen(kWeightsPrefix)), std::move(t));
    } else if (starts_with(name, kOptimPrefix)) {
      state.optimizer_state.emplace_back(name.substr(std::strlen(kOptimPrefix)), std::move(t));
    } else if (starts_with(name, kPowerSgdPrefix) && rec.has_powersgd) {
      // "powersgd.b<index>.error", ".q" or ".sent_p", for a bucket the record lists with that part.
      const std::string rest = name.substr(std::strlen(kPowerSgdPrefix));
      const size_t dot = rest.find('.');
      const std::string digits = rest.substr(0, dot);
      const std::string part = dot == std::string::npos ? "" : rest.substr(dot + 1);
      bool ok = !digits.empty() && digits.size() <= 9 && digits.find_first_not_of("0123456789") == std::string::npos;
      const size_t index = ok ? static_cast<size_t>(std::stoul(digits)) : 0;
      auto it = listed.find(index);
      ok = ok && it != listed.end() &&
           ((part == "error" && it->second.error) || (part == "q" && it->second.q) ||
            (part == "sent_p" && it->second.sent_p));
      if (!ok) fail(tensors_path, "unexpected tensor " + quote(name) + " (not in the record's PowerSGD buckets)");
      // The error may be 16-bit (--powersgd-error-dtype bucket); Q and the sent P are always f32.
      const bool dtype_ok = t.dtype() == DType::kF32 ||
                            (part == "error" && (t.dtype() == DType::kBF16 || t.dtype() == DType::kF16));
      if (!dtype_ok || t.dim() != 1)
        fail(tensors_path, "PowerSGD tensor " + quote(name) + " is " + describe(t) + ", expected 1-D F32" +
                               (part == "error" ? " (or BF16/F16 for an error)" : ""));
      PowerSgdState::Bucket& b = state.powersgd->buckets[index];
      (part == "error" ? b.error : part == "q" ? b.q : b.sent_p) = std::move(t);
    } else {
      fail(tensors_path, "unexpected tensor " + quote(name) +
                             " (checkpoint tensors are named weights.*, optim.* or powersgd.b<i>.error|q|sent_p)");
    }
  }
  if (state.powersgd)
    for (const auto& [index, b] : listed) {
      const PowerSgdState::Bucket& got = state.powersgd->buckets[index];
      const char* missing = b.error && !got.error.defined() ? "error"
                            : b.q && !got.q.defined()         ? "q"
                            : b.sent_p && !got.sent_p.defined() ? "sent_p"
                                                                : nullptr;
      if (missing)
        fail(tensors_path, "PowerSGD bucket " + std::to_string(index) + "'s " + missing +
                               " tensor is missing (the record lists it)");
    }
  check_tensors_match(tensors_path, "weight", state.weights, expect.weights);
  check_tensors_match(tensors_path, "optimizer state", state.optimizer_state, expect.optimizer_state);
  if (parameter_signature(state.weights) != rec.param_signature)
    fail(tensors_path, "its weights do not match the record's parameter signature " + quote(rec.param_signature));
  return state;
}

void restore_tensors(const NamedTensors& saved, const NamedTensors& targets, const std::string& what) {
  SafetensorsFile file;
  file.tensors = saved;
  load_named_tensors(file, targets, what);
}

PowerSgdState powersgd_state_on(const PowerSgdState& saved, Device device) {
  PowerSgdState out;
  out.iter = saved.iter;
  for (const auto& [index, b] : saved.buckets) {
    PowerSgdState::Bucket& o = out.buckets[index];
    if (b.error.defined()) o.error = b.error.to(device).clone();
    if (b.q.defined()) o.q = b.q.to(device).clone();
    if (b.sent_p.defined()) o.sent_p = b.sent_p.to(device).clone();
  }
  return out;
}

void check_checkpoint_record(const std::string& text, const std::string& label) {
  (void)parse_record_text(text, label);
}

}  // namespace vitddp
