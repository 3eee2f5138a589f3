#include "framework/core/dtype.h"

#include <cstdlib>

#include "framework/core/error.h"

namespace vitddp {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF64: return 8;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI64: return 8;
  }
  VITDDP_ASSERT(false, "unknown dtype");
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI64: return "i64";
  }
  return "?";
}

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF64: return "F64";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kI64: return "I64";
  }
  return "?";
}

bool dtype_from_safetensors_name(const std::string& name, DType* out) {
  static const std::pair<const char*, DType> kNames[] = {{"F32", DType::kF32}, {"F64", DType::kF64},
                                                          {"BF16", DType::kBF16}, {"F16", DType::kF16},
                                                          {"I64", DType::kI64}};
  for (const auto& [text, dtype] : kNames) {
    if (name == text) {
      *out = dtype;
      return true;
    }
  }
  return false;
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5) {
    char* end = nullptr;
    long index = std::strtol(text.c_str() + 5, &end, 10);
    if (*end == '\0' && index >= 0 && index < 1024) return Device::cuda(static_cast<int>(index));
  }
  throw Error("unknown device '" + text + "' (expected cpu, cuda or cuda:N)");
}

}  // namespace vitddp
