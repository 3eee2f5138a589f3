// Pinned (page-locked) host memory, so host-to-device copies run asynchronously on a copy
// stream at full bandwidth. The loader builds batches straight into it.
#pragma once

#include "framework/core/allocator.h"

namespace vitddp::cuda {

Allocator& pinned_host_allocator();

}  // namespace vitddp::cuda
