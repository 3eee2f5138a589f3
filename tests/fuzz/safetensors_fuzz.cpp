// libFuzzer target: the safetensors reader. Every input must either parse or throw
// vitddp::Error; anything else (a crash, a sanitizer report, another exception) is a bug.
#include <cstddef>
#include <cstdint>

#include "framework/core/error.h"
#include "framework/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    vitddp::SafetensorsFile file = vitddp::parse_safetensors(data, size, "fuzz.safetensors");
    // Touch every tensor's bytes, so a view past the data region would be caught.
    double sum = 0;
    for (const auto& [name, t] : file.tensors)
      for (double v : t.to_vector()) sum += v;
    (void)sum;
  } catch (const vitddp::Error&) {
  }
  return 0;
}
