// The record of one rank's checkpoint, DIR/step-N/rank-R.json (the layout is in checkpoint.h):
// the text save_checkpoint writes, and the strict reading every loader and the fuzzer go
// through, which refuses a record with a key unknown or missing, a field of the wrong type or
// out of range, or one that contradicts itself, naming the file and the field. Internal to
// train/checkpoint/: the public entry point is check_checkpoint_record in checkpoint.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/checkpoint/checkpoint.h"

namespace vitddp {

// The record's "format", and the "format" metadata of the tensors file it describes.
constexpr const char* kCheckpointFormat = "vitddp-checkpoint";

// "rank-<rank><extension>": a rank's file in a step folder.
std::string rank_file(int rank, const char* extension);

// Names, shapes and dtypes of the weights, hashed: a quick fingerprint of the architecture.
std::string parameter_signature(const NamedTensors& weights);

// A record as read, every field checked (parse_record_text).
struct CheckpointRecord {
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
  nlohmann::json config;
  std::string tensors_file;
  uint64_t tensors_bytes = 0;
  std::string tensors_crc32;
};

// Parses a record's `text`; `label` (the file's path) starts every error message.
CheckpointRecord parse_record_text(const std::string& text, const std::string& label);
// The record file at `path`, read (a size bound keeps an absurd file from being read) and parsed.
CheckpointRecord parse_record(const std::string& path);

// The CRC-32 a version 2 record's "record_crc32" holds for a record's `text` (JSON): of its other
// fields as compact JSON, in the text's order. Tests that edit a record on purpose reseal it with
// this, so the check they aim at is reached.
std::string record_fields_crc32(const std::string& text);

// The record of `s`, whose tensors went to `tensors_file` (a name in the step folder) with
// `bytes` bytes and CRC-32 `crc`.
std::string record_text(const CheckpointState& s, const std::string& tensors_file, uint64_t bytes, uint32_t crc);

}  // namespace vitddp
