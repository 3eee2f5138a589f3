#include "framework/cuda/profiler.h"

#include <cuda_profiler_api.h>

#include "framework/cuda/check.h"

namespace vitddp::cuda {

void profiler_start() { CUDA_CHECK(cudaProfilerStart()); }
void profiler_stop() { CUDA_CHECK(cudaProfilerStop()); }

}  // namespace vitddp::cuda
