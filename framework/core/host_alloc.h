// Host memory for tensors and staging buffers. Buffers of 2 MB or more are 2 MB aligned, a
// whole number of 2 MB, and advised onto transparent huge pages (Note [Huge pages for large
// host buffers]); smaller ones are `alignment` aligned. Both are released by free_host.
//
// Note [Huge pages for large host buffers]: copying a run's state out of a process (a list of
// writes the kernel copies page by page through CMA) is bound by the pages the kernel walks, 512x
// fewer on 2 MB pages; measured faster for the list and the contiguous loop alike, and no slower
// for training (docs/performance.md, "Moving a run's state to another process"). The cost: up to
// 2 MB of rounding per buffer of 2 MB or more. madvise is advice: where the kernel gives no huge
// pages the buffer works on 4 KB pages.
#pragma once

#include <cstddef>

namespace vitddp {

constexpr size_t kHugePage = size_t{2} << 20;

// nullptr when the memory cannot be had.
void* allocate_host(size_t nbytes, size_t alignment = 64);
void free_host(void* ptr) noexcept;

}  // namespace vitddp
