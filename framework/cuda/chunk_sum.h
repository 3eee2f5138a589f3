// The reduction step of the host-copy all-reduce (distributed/nccl/host_copy_transport.cpp): one
// chunk of a peer's contribution, copied to the device, added into this rank's chunk.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "framework/core/dtype.h"

namespace vitddp::cuda {

// dst[i] = (dst[i] + src[i]) * scale for i < n, computed in f32 and rounded once; f32, bf16 or
// f16 (throws on others); on `stream`.
void chunk_sum_forward(void* dst, const void* src, int64_t n, DType dtype, float scale, cudaStream_t stream);

}  // namespace vitddp::cuda
