// NVTX ranges in the "vitddp" domain, so Nsight Systems shows a step as named, coloured blocks:
// "step N", "get batch", "forward", "backward", "allreduce b3 24.0MB", "compress b3",
// "optimizer step". NvtxRange is an RAII scope (move-only); nvtx_mark is an instant.
//
// The nvtx3 calls live in nvtx.cpp, the one file that sees nvtx3's headers (they sit in the CUDA
// toolkit's include folder, which a CPU build should not put on every target's path). Built
// without nvtx3 (VITDDP_WITH_NVTX=0) every call is an empty function. With nvtx3 but no tool
// attached, nvtx3 turns each call into a no-op after the first, so ranges cost a function call.
// See Note [Range names] for the names the trainer uses.
#pragma once

#include <cstdint>
#include <string>

namespace vitddp {

// One colour per kind of work, so a timeline reads at a glance.
enum class NvtxColor : uint8_t {
  kStep,       // the whole step
  kData,       // get batch, host-to-device copies
  kForward,
  kBackward,
  kComm,       // bucket all-reduce
  kCompress,   // comm hooks: compress / decompress
  kOptimizer,
  kKernel,     // VITDDP_NVTX_FN() in launchers
  kOther,
};

// ARGB value of a colour (exposed for tests and for the Chrome trace's colours).
uint32_t nvtx_argb(NvtxColor color);

// True when built with nvtx3 (the calls reach NVTX; a tool may or may not be attached).
bool nvtx_enabled();

class NvtxRange {
 public:
  explicit NvtxRange(const char* name, NvtxColor color = NvtxColor::kOther);
  explicit NvtxRange(const std::string& name, NvtxColor color = NvtxColor::kOther)
      : NvtxRange(name.c_str(), color) {}
  ~NvtxRange();

  NvtxRange(NvtxRange&& other) noexcept : active_(other.active_) { other.active_ = false; }
  NvtxRange& operator=(NvtxRange&& other) noexcept;
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

  // Pops now rather than at the end of the scope (idempotent).
  void end();

 private:
  bool active_ = false;
};

// An instant marker in the "vitddp" domain.
void nvtx_mark(const char* name, NvtxColor color = NvtxColor::kOther);
inline void nvtx_mark(const std::string& name, NvtxColor color = NvtxColor::kOther) {
  nvtx_mark(name.c_str(), color);
}

// Note [Range names]
// Ranges carry stable names so tools and tests can find them; the ones that carry numbers build
// them here, in one place: "step 12", "allreduce b3 24.0MB" (MB = 2^20 bytes, as --bucket-mb),
// "compress b3", "decompress b3", "update b3" (a bucket's optimizer update in the next forward).
std::string nvtx_step_name(int64_t step);
std::string nvtx_allreduce_name(int bucket_index, int64_t bytes);
std::string nvtx_compress_name(int bucket_index);
std::string nvtx_decompress_name(int bucket_index);
std::string nvtx_update_name(int bucket_index);

}  // namespace vitddp

#define VITDDP_NVTX_CONCAT_INNER(a, b) a##b
#define VITDDP_NVTX_CONCAT(a, b) VITDDP_NVTX_CONCAT_INNER(a, b)

// A range over the rest of the enclosing scope: VITDDP_NVTX_RANGE("forward", NvtxColor::kForward).
#define VITDDP_NVTX_RANGE(...) \
  ::vitddp::NvtxRange VITDDP_NVTX_CONCAT(vitddp_nvtx_range_, __LINE__)(__VA_ARGS__)

// A range named after the enclosing function, for kernel launchers: each launch shows by name
// in a timeline.
#define VITDDP_NVTX_FN() VITDDP_NVTX_RANGE(__func__, ::vitddp::NvtxColor::kKernel)
