// Pinned (page-locked) host memory, so host-to-device copies run asynchronously on a copy
// stream at full bandwidth. The loader builds batches straight into it.
//
// Blocks are cached by size and reused: cudaHostAlloc is slow, and cudaFreeHost synchronises
// the device, which would stall a pipeline that frees a batch every step. A block may be freed
// only once the copies reading it have completed (the owner waits on their event first, as
// train/batch_source.cpp does); the cache hands it out again at once.
#pragma once

#include "framework/core/allocator.h"

namespace vitddp::cuda {

Allocator& pinned_host_allocator();

}  // namespace vitddp::cuda
