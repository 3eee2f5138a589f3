// The arena's buffers as the fused CUDA optimizer kernels take them.
#pragma once

#include "framework/nn/param_arena.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/optimizer.h"

namespace vitddp {

inline cuda::FlatBuffers flat_buffers(const ParamArena& arena, const int64_t* skip_if_set, int64_t* report_nonfinite) {
  cuda::FlatBuffers b;
  b.master = arena.flat_master().data<float>();
  b.grads = arena.flat_grads().data_ptr();
  b.grad_dtype = arena.flat_grads().dtype();
  if (arena.mixed_precision()) {
    b.params16 = arena.flat_params().data_ptr();
    b.params16_dtype = arena.flat_params().dtype();
  }
  b.n = arena.numel();
  b.skip_if_set = skip_if_set;
  b.report_nonfinite = report_nonfinite;
  return b;
}

}  // namespace vitddp
#endif
