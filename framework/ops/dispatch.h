// Device dispatch for ops. The CPU kernels run here; an op without a CUDA kernel yet fails
// with a clear message naming it (issue [2/7] adds the CUDA kernels, each through
// on_device(..., cpu_fn, cuda_fn)).
#pragma once

#include <string>

#include "framework/core/dtype.h"
#include "framework/core/error.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/op_profiler.h"
#endif

namespace vitddp {

template <typename CpuFn>
void on_device(Device device, const char* op, CpuFn&& cpu_fn) {
  if (device.is_cpu()) {
    cpu_fn();
    return;
  }
  throw Error(std::string(op) + ": no kernel for " + device.str() + " in this build");
}

template <typename CpuFn, typename CudaFn>
void on_device(Device device, const char* op, CpuFn&& cpu_fn, CudaFn&& cuda_fn) {
  if (device.is_cpu()) {
    cpu_fn();
    return;
  }
#if VITDDP_WITH_CUDA
  cuda::OpScope scope(op);
  cuda_fn();
#else
  (void)cuda_fn;
  throw Error(std::string(op) + ": " + device.str() + " requested but this build has no CUDA backend");
#endif
}

}  // namespace vitddp
