// NvtxRange and nvtx_mark over nvtx3's domain API, or empty bodies without nvtx3. This is the
// only file that includes nvtx3 (see the header). nvtx3 is header-only: the first call looks for
// a tool (NVTX_INJECTION64_PATH, set by nsys or by our test recorder) and binds the calls to it,
// or to no-ops when there is none.
#include "framework/core/nvtx.h"

#include <cstdio>

#if VITDDP_WITH_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace vitddp {

uint32_t nvtx_argb(NvtxColor color) {
  switch (color) {
    case NvtxColor::kStep: return 0xFF5B6770;       // slate
    case NvtxColor::kData: return 0xFF8E6CBF;       // violet
    case NvtxColor::kForward: return 0xFF2E86DE;    // blue
    case NvtxColor::kBackward: return 0xFFE67E22;   // orange
    case NvtxColor::kComm: return 0xFF27AE60;       // green
    case NvtxColor::kCompress: return 0xFF16A085;   // teal
    case NvtxColor::kOptimizer: return 0xFFC0392B;  // red
    case NvtxColor::kKernel: return 0xFF95A5A6;     // grey
    case NvtxColor::kOther: return 0xFFBDC3C7;      // light grey
  }
  return 0xFFBDC3C7;
}

std::string nvtx_step_name(int64_t step) { return "step " + std::to_string(step); }

std::string nvtx_allreduce_name(int bucket_index, int64_t bytes) {
  char mb[32];
  std::snprintf(mb, sizeof(mb), "%.1fMB", static_cast<double>(bytes) / (1 << 20));
  return "allreduce b" + std::to_string(bucket_index) + " " + mb;
}

std::string nvtx_compress_name(int bucket_index) { return "compress b" + std::to_string(bucket_index); }
std::string nvtx_decompress_name(int bucket_index) { return "decompress b" + std::to_string(bucket_index); }
std::string nvtx_update_name(int bucket_index) { return "update b" + std::to_string(bucket_index); }

#if VITDDP_WITH_NVTX

namespace {

// Created on first use; nvtx3 hands out the same handle to every caller asking for the name.
nvtxDomainHandle_t domain() {
  static nvtxDomainHandle_t handle = nvtxDomainCreateA("vitddp");
  return handle;
}

nvtxEventAttributes_t attributes(const char* name, NvtxColor color) {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.colorType = NVTX_COLOR_ARGB;
  a.color = nvtx_argb(color);
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  return a;
}

}  // namespace

bool nvtx_enabled() { return true; }

NvtxRange::NvtxRange(const char* name, NvtxColor color) : active_(true) {
  nvtxEventAttributes_t a = attributes(name, color);
  nvtxDomainRangePushEx(domain(), &a);
}

void NvtxRange::end() {
  if (!active_) return;
  active_ = false;
  nvtxDomainRangePop(domain());
}

void nvtx_mark(const char* name, NvtxColor color) {
  nvtxEventAttributes_t a = attributes(name, color);
  nvtxDomainMarkEx(domain(), &a);
}

#else  // without nvtx3: nothing reaches a tool

bool nvtx_enabled() { return false; }
NvtxRange::NvtxRange(const char*, NvtxColor) : active_(true) {}
void NvtxRange::end() { active_ = false; }
void nvtx_mark(const char*, NvtxColor) {}

#endif

NvtxRange::~NvtxRange() { end(); }

NvtxRange& NvtxRange::operator=(NvtxRange&& other) noexcept {
  if (this != &other) {
    end();
    active_ = other.active_;
    other.active_ = false;
  }
  return *this;
}

}  // namespace vitddp
