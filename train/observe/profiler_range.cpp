#include "train/observe/profiler_range.h"

#if VITDDP_WITH_CUDA
#include "framework/cuda/profiler.h"
#endif

namespace vitddp {

void ProfilerRange::step_begins(int64_t step) {
#if VITDDP_WITH_CUDA
  if (step + 1 == first_) cuda::profiler_start();
#else
  (void)step;
#endif
}

void ProfilerRange::step_ends(int64_t step) {
#if VITDDP_WITH_CUDA
  if (step + 1 == last_) cuda::profiler_stop();
#else
  (void)step;
#endif
}

}  // namespace vitddp
