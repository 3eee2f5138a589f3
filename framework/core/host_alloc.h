// Host memory for tensors and staging buffers. Buffers of 2 MB or more are 2 MB aligned, a
// whole number of 2 MB, and advised onto transparent huge pages (Note [Huge pages for large
// host buffers]); smaller ones are `alignment` aligned. Both are released by free_host.
//
// Note [Huge pages for large host buffers]: copying a run's state out of a process (a list of
// writes the kernel copies page by page through CMA, a memory checkpoint's copy) is bound by the
// pages it walks, and moved a third faster on 2 MB pages than on 4 KB ones, while training's
// step time did not move (docs/performance.md, "Moving a run's state to another process").
// madvise is advice: where the kernel gives no huge pages the buffer works on 4 KB pages.
#pragma once

#include <cstddef>

namespace vitddp {

constexpr size_t kHugePage = size_t{2} << 20;

// nullptr when the memory cannot be had.
void* allocate_host(size_t nbytes, size_t alignment = 64);
void free_host(void* ptr) noexcept;

}  // namespace vitddp
