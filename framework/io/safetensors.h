// Reading and writing the safetensors format (https://github.com/huggingface/safetensors):
//
//   u64 little-endian N | N bytes of JSON header | data region
//
// The header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets in
// bytes, relative to the start of the data region) and may hold "__metadata__": {str: str}.
// Data is raw little-endian, row-major. Supported dtypes: F32, F64, BF16, F16, I64.
//
// Reading validates everything (sizes, JSON types, dtypes, element-count overflow, offsets, that
// the tensors tile the data region exactly with no overlap, gap or trailing bytes, duplicate
// names) before allocating anything, so a hostile file can neither crash the reader nor make it
// allocate more than the file's own size. Every problem is a vitddp::Error with one line that
// starts with the file name, e.g.
//   "model.safetensors: tensor 'conv_proj.weight' data_offsets [0, 100] hold 100 bytes but
//    F32[3, 4] needs 48"
//
// Writing is crash-safe: "<path>.tmp.<pid>" is written, fsync'ed and renamed over `path`, then
// the directory is fsync'ed; readers see either the old file or the complete new one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "framework/core/tensor.h"

namespace vitddp {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct SafetensorsFile {
  NamedTensors tensors;  // CPU, contiguous; in header order
  std::map<std::string, std::string> metadata;

  // The tensor called `name`, or nullptr.
  const Tensor* find(const std::string& name) const;
};

// Limits on what the reader accepts (the header limit matches the reference implementation).
constexpr uint64_t kSafetensorsMaxHeaderBytes = 100ull * 1000 * 1000;
constexpr int kSafetensorsMaxRank = 64;

SafetensorsFile read_safetensors(const std::string& path);

// Parses a whole file held in memory; `label` stands for the file name in error messages.
// The same validation as read_safetensors (this is the entry point for fuzzers).
SafetensorsFile parse_safetensors(const void* data, size_t size, const std::string& label);

// Tensors may live on any device and be non-contiguous; they are written in the given order.
// Names must be unique, non-empty and must not start with "__" (reserved by the format).
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The bytes write_safetensors would write (header padded with spaces to a multiple of 8).
std::string serialize_safetensors(const NamedTensors& tensors,
                                  const std::map<std::string, std::string>& metadata = {});

// Hands the bytes write_safetensors would write to `sink` in order, a piece at a time (the header,
// then each tensor's data), without building the file in memory; for writers with their own
// file handling (train/checkpoint/checkpoint.cpp).
void stream_safetensors(const NamedTensors& tensors, const std::function<void(const char*, size_t)>& sink,
                        const std::map<std::string, std::string>& metadata = {});

// Copies the file's tensors into existing `targets` (any device, e.g. model parameters) by name.
// No conversion is done: dtype and shape must match exactly. Everything is checked before anything
// is copied, so on error the targets are untouched. Errors (one line, starting with `path`) list
// the missing tensors (unless allow_missing), the tensors whose shape or dtype differ (both
// given) and the unexpected extra tensors in the file (unless allow_unexpected).
void load_named_tensors(const SafetensorsFile& file, const NamedTensors& targets, const std::string& path,
                        bool allow_missing = false, bool allow_unexpected = false);

}  // namespace vitddp
