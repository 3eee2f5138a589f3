// Device dispatch for ops: on_device(device, op, cpu_fn, cuda_fn) runs the kernel of the
// tensor's device; the CUDA one inside an OpScope (--op-breakdown). A CPU-only build names the
// op when asked for a CUDA tensor.
#pragma once

#include <string>

#include "framework/core/dtype.h"
#include "framework/core/error.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/op_profiler.h"
#endif

namespace vitddp {

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
