// Copies and fills of CUDA tensors (any layout, with dtype conversion) on the current stream.
#pragma once

#include <cstddef>

#include "framework/core/tensor.h"

namespace vitddp::cuda {

// dst and src on the same CUDA device, same shape; dtype converted, any strides.
void copy_tensor(const Tensor& dst, const Tensor& src);
void fill_tensor(const Tensor& dst, double value);
// Contiguous bytes between host and device or between devices, on the current stream; a copy
// to the host is complete on return. A copy from pinned host memory is asynchronous: the
// source must stay alive until the stream has run it.
void memcpy_between(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

}  // namespace vitddp::cuda
