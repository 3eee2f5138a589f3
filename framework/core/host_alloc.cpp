#include "framework/core/host_alloc.h"

#include <sys/mman.h>

#include <cstdlib>

namespace vitddp {

void* allocate_host(size_t nbytes, size_t alignment) {
  if (nbytes < kHugePage) {
    const size_t rounded = (nbytes + alignment - 1) / alignment * alignment;
    return std::aligned_alloc(alignment, rounded > 0 ? rounded : alignment);
  }
  const size_t rounded = (nbytes + kHugePage - 1) / kHugePage * kHugePage;
  void* ptr = std::aligned_alloc(kHugePage, rounded);
  // Advice only: its failure (no transparent huge pages in this kernel) leaves 4 KB pages.
  if (ptr) (void)::madvise(ptr, rounded, MADV_HUGEPAGE);
  return ptr;
}

void free_host(void* ptr) noexcept { std::free(ptr); }

}  // namespace vitddp
