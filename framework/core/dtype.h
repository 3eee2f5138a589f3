// Element types and devices. Storage types bf16/f16 are converted on the CPU; arithmetic on
// the CPU runs in f32 or f64 (f64 exists for finite-difference gradient checks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace vitddp {

enum class DType : uint8_t { kF32, kF64, kBF16, kF16, kI64 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);            // "f32", "f64", "bf16", "f16", "i64"
const char* safetensors_dtype_name(DType dtype);  // "F32", "F64", "BF16", "F16", "I64"
// Parses a safetensors dtype name; returns false for any other string.
bool dtype_from_safetensors_name(const std::string& name, DType* out);
inline bool is_floating(DType d) { return d != DType::kI64; }

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static Device cpu() { return {DeviceType::kCPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::kCUDA, index}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool operator==(const Device& o) const { return type == o.type && (is_cpu() || index == o.index); }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;  // "cpu" or "cuda:N"
};

// "cpu", "cuda", "cuda:N"; throws on anything else.
Device parse_device(const std::string& text);

}  // namespace vitddp
