// Device memory for CUDA tensors. See Note [Device allocator] in allocator.cpp.
#pragma once

#include <cstddef>
#include <unordered_set>
#include <vector>

#include "framework/core/allocator.h"

namespace vitddp::cuda {

Allocator& device_allocator();

// Note [Allocations under capture] (allocator.cpp): while a CaptureLedger is set on a thread,
// the device allocator notes what that thread allocates (graph memory, freed inside the graph
// when the capture frees it, and not counted in current or peak bytes: the graph's memory is
// measured apart, cuda::graph_memory_high_bytes) and holds back its frees of memory made before
// the capture, which the graph may read on every replay, until release_held_frees().
struct CaptureLedger {
  struct Held {
    void* ptr;
    size_t nbytes;
    int device;
  };
  std::unordered_set<void*> made;  // allocated under this ledger and not freed yet
  size_t made_bytes = 0;
  std::vector<Held> held;  // frees held back
};
// The calling thread's ledger (null: none, the default).
void set_capture_ledger(CaptureLedger* ledger);
// Frees what `ledger` held back, in order on each block's device's current stream.
void release_held_frees(CaptureLedger& ledger) noexcept;
// After a failed capture: the blocks it made, still alive, belong to a graph that is gone; their
// later frees are skipped (they were never really allocated).
void drop_capture_blocks(CaptureLedger& ledger);

}  // namespace vitddp::cuda
