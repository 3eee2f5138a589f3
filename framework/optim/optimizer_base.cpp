#include <algorithm>

#include "framework/core/error.h"
#include "framework/optim/nonfinite.h"
#include "framework/optim/optimizer.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/optimizer.h"
#endif

namespace vitddp {

bool Optimizer::skip_on_host() const {
  return skip_flag_.defined() && skip_flag_.device().is_cpu() && skip_flag_.data<int64_t>()[0] != kNoNonfinite;
}

bool Optimizer::begin_counted_step() {
  skipped_ = skip_on_host();
  if (skipped_) return false;
  ++step_count_;
  if (int64_t* report = report_flag()) {
    if (report_flag_.device().is_cuda()) {
#if VITDDP_WITH_CUDA
      cuda::reset_nonfinite_report(report);
#endif
    } else {
      *report = kNoNonfinite;
    }
  }
  return true;
}

void Optimizer::report_nonfinite_on_host(const float* grads, int64_t begin, int64_t end) const {
  int64_t* report = report_flag();
  if (!report) return;
  const int64_t found = first_nonfinite_index(grads + begin, end - begin);
  if (found != kNoNonfinite) *report = std::min(*report, begin + found);
}

bool Optimizer::update_runs(int64_t begin, int64_t end) const {
  VITDDP_ASSERT(0 <= begin && begin <= end && end <= size(), name(), ": update range outside the arena");
  if (skipped_) return false;
  VITDDP_ASSERT(step_count_ > 0, name(), ": update() before the first begin_step()");
  return true;
}

}  // namespace vitddp
