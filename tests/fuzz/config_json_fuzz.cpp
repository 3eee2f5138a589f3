// libFuzzer target: the --config JSON reader and the configuration's validation. Every input
// must either be accepted or throw vitddp::Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "framework/core/error.h"
#include "train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    vitddp::TrainConfig config;
    vitddp::parse_json_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz.json", &config);
    config.validate();
    (void)config.profile_range();
    (void)config.to_json().dump();
  } catch (const vitddp::Error&) {
  }
  return 0;
}
