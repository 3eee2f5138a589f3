// cudaProfilerStart/Stop, so `nsys profile --capture-range=cudaProfilerApi` records only the
// steps asked for with --profile-steps.
#pragma once

namespace vitddp::cuda {

void profiler_start();
void profiler_stop();

}  // namespace vitddp::cuda
