// Device memory for CUDA tensors. See Note [Device allocator] in allocator.cpp.
#pragma once

#include "framework/core/allocator.h"

namespace vitddp::cuda {

Allocator& device_allocator();

}  // namespace vitddp::cuda
