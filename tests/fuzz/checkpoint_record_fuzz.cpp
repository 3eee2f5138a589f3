// libFuzzer target: the checkpoint record reader (rank-R.json), with every check
// load_checkpoint makes of a record. Every input must either be accepted or throw
// vitddp::Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "framework/core/error.h"
#include "train/checkpoint/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    vitddp::check_checkpoint_record(std::string(reinterpret_cast<const char*>(data), size), "rank-0.json");
  } catch (const vitddp::Error&) {
  }
  return 0;
}
