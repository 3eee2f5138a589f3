#include "train/observe/nvtx_ranges.h"

namespace vitddp {
namespace {

NvtxColor color_of(Phase phase) {
  switch (phase) {
    case Phase::kGetBatch: return NvtxColor::kData;
    case Phase::kForward: return NvtxColor::kForward;
    case Phase::kBackward: return NvtxColor::kBackward;
    case Phase::kOptimizer: return NvtxColor::kOptimizer;
  }
  return NvtxColor::kOther;
}

}  // namespace

void NvtxRanges::step_begins(int64_t step) { open_.emplace_back(nvtx_step_name(step + 1), NvtxColor::kStep); }
void NvtxRanges::phase_begins(Phase phase) { open_.emplace_back(phase_name(phase), color_of(phase)); }

void NvtxRanges::phase_ends(Phase) {
  if (!open_.empty()) open_.pop_back();
}

void NvtxRanges::step_ends(int64_t) { open_.clear(); }

}  // namespace vitddp
