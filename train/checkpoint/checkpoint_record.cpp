// The record (rank-R.json): see checkpoint_record.h, and checkpoint.h for the layout.
#include "train/checkpoint/checkpoint_record.h"

#include <algorithm>
#include <set>

#include "framework/core/dtype.h"
#include "framework/core/error.h"
#include "framework/core/message_text.h"
#include "framework/core/shape.h"
#include "framework/io/file_util.h"

namespace vitddp {

namespace {

std::string quote(const std::string& text, size_t max_len = 80) { return quote_for_message(text, max_len); }
std::string sanitize(const std::string& text, size_t max_len = 200) { return sanitize_for_message(text, max_len); }

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// Version 2 records carry "record_crc32", the CRC-32 of the record's other fields as compact JSON
// in their order: a byte that changes a field (a step, the loader's position) fails it, so a
// damaged record is skipped like a damaged tensors file instead of resuming wrong. Version 1
// records (without it) still load.
constexpr int kVersion = 2;
constexpr int kOldestVersion = 1;

// The CRC-32 of `o` without its "record_crc32" key, as compact JSON.
std::string fields_crc32(ojson o) {
  o.erase("record_crc32");
  const std::string text = o.dump();
  return hex32(crc32(text.data(), text.size()));
}
constexpr uint64_t kMaxRecordBytes = 64ull << 20;  // a record is a few KB; refuse absurd files

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

}  // namespace

std::string rank_file(int rank, const char* extension) { return "rank-" + std::to_string(rank) + extension; }

std::string parameter_signature(const NamedTensors& weights) {
  std::string text;
  for (const auto& [name, t] : weights)
    text += name + ":" + safetensors_dtype_name(t.dtype()) + shape_str(t.shape()) + ";";
  return "crc32:" + hex32(crc32(text.data(), text.size())) + ":" + std::to_string(weights.size());
}

// `label` (the file's path) starts every error message.
CheckpointRecord parse_record_text(const std::string& text, const std::string& label) {
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
               {"buckets", "record_crc32"});
  if (r.string(j, "", "format") != kCheckpointFormat)
    r.fail("field 'format' is ", quote(j["format"].get<std::string>()), ", expected '", kCheckpointFormat, "'");
  int64_t version = r.integer(j, "", "version", 0);
  if (version < kOldestVersion || version > kVersion)
    r.fail("record version ", version, " is not supported (this build reads ", kOldestVersion, " to ", kVersion, ")");
  // Checked whenever present: the version is among the fields it covers, so a damaged version
  // cannot switch it off.
  if (version >= 2 && !j.contains("record_crc32"))
    r.fail("field 'record_crc32' is missing (a version 2 record carries it)");
  if (j.contains("record_crc32")) {
    const std::string want = r.string(j, "", "record_crc32");
    const std::string got = fields_crc32(ojson::parse(text));
    if (got != want)
      r.fail("the record fails its checksum (CRC-32 ", got, " of its fields, it says ", quote(want),
             "): the file is damaged");
  }
  if (!r.boolean(j, "", "complete")) r.fail("record is marked incomplete");

  CheckpointRecord rec;
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
      CheckpointRecord::PsgdBucket bucket;
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

CheckpointRecord parse_record(const std::string& path) {
  return parse_record_text(read_text(path, kMaxRecordBytes, "a checkpoint record"), path);
}

std::string record_fields_crc32(const std::string& text) { return fields_crc32(ojson::parse(text)); }

std::string record_text(const CheckpointState& s, const std::string& tensors_file, uint64_t bytes, uint32_t crc) {
  ojson j = ojson::object();
  j["format"] = kCheckpointFormat;
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
  j["complete"] = true;  // the record is only ever renamed into place whole
  j["record_crc32"] = fields_crc32(j);
  return j.dump(2) + "\n";
}

void check_checkpoint_record(const std::string& text, const std::string& label) {
  (void)parse_record_text(text, label);
}

}  // namespace vitddp
