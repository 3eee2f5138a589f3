// Device memory from ncclMemAlloc: CUDA virtual memory mapped for the GPU's NVLink peers, which
// a communicator can register (ProcessGroupNccl::register_buffer, and NCCL's own registration
// of buffers in captured CUDA graphs) so that its collectives read and write it in place. See
// Note [Registered gradients] in pg_nccl.cpp.
#pragma once

#include "framework/core/allocator.h"

namespace vitddp {

// One per process; counts what it holds per device, like the device allocator.
Allocator& nccl_memory_allocator();

}  // namespace vitddp
