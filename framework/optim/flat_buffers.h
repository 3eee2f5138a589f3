// The arena's buffers as the fused CUDA optimizer kernels take them.
#pragma once

#include "framework/nn/param_arena.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/optimizer.h"

namespace vitddp {

// Elements [begin, end) of the arena's buffers (Note [An update in ranges]).
inline cuda::FlatBuffers flat_buffers(const ParamArena& arena, const int64_t* skip_if_set, int64_t* report_nonfinite,
                                      int64_t begin, int64_t end) {
  cuda::FlatBuffers b;
  b.master = arena.flat_master().data<float>() + begin;
  b.grads = static_cast<const char*>(arena.flat_grads().data_ptr()) + begin * dtype_size(arena.flat_grads().dtype());
  b.grad_dtype = arena.flat_grads().dtype();
  if (arena.mixed_precision()) {
    b.params16 = static_cast<char*>(arena.flat_params().data_ptr()) + begin * dtype_size(arena.flat_params().dtype());
    b.params16_dtype = arena.flat_params().dtype();
  }
  b.n = end - begin;
  b.index_base = begin;
  b.skip_if_set = skip_if_set;
  b.report_nonfinite = report_nonfinite;
  return b;
}

}  // namespace vitddp
#endif
