#include "framework/cuda/allocator.h"

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <unordered_set>

#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {

// Note [Allocations under capture]
// A CUDA graph captured from the training step (train/graphed_step.h) allocates and frees as the
// step did: cudaMallocAsync and cudaFreeAsync on a capturing stream become the graph's own
// allocation and free nodes, replayed at the same addresses. Two things would break a replay:
// - a free, inside the capture, of memory made before it (a tensor of an earlier eager step
//   released by the step's host code): the graph would free that block on its first replay and
//   again on the next. Such frees are held in the ledger instead, and done once the graph is
//   destroyed (the graph may read the block on every replay, so never earlier);
// - memory made in the capture and still alive at its end: a graph cannot be launched again
//   while an allocation of its last launch is alive. The ledger's `made` names them, so the
//   capture can refuse with a clear error.
thread_local CaptureLedger* t_ledger = nullptr;
// Blocks of failed captures (drop_capture_blocks): frees skipped. Rarely non-empty.
std::mutex g_dropped_mutex;
std::unordered_set<void*> g_dropped;
std::atomic<bool> g_any_dropped{false};

// Note [Device allocator]
// Device memory comes from CUDA's stream-ordered allocator (cudaMallocAsync) on the device's
// default memory pool, whose release threshold we raise to "never": freed blocks stay in the
// pool and are reused by later allocations on the same stream without any cudaMalloc, which is
// the caching allocator the steady state needs, kept by NVIDIA and usable inside CUDA graph
// capture. Allocation and free happen on the thread's current stream; memory that another
// stream uses (the loader's copies, the reducer's buckets, PowerSGD's side stream) is either
// long-lived or ordered with events before it is freed, and the pool never reuses a block
// across streams by making one stream wait for another. We count requested bytes for
// current/peak figures, as torch.cuda.max_memory_allocated does.
//
// VITDDP_POISON_ALLOC=1 fills every new allocation with 0xFF bytes (NaN in every float format)
// so tests catch kernels that leave outputs unwritten.
class AsyncPoolAllocator final : public Allocator {
 public:
  static constexpr int kMaxDevices = 64;

  AsyncPoolAllocator() {
    const char* poison = std::getenv("VITDDP_POISON_ALLOC");
    poison_ = poison && poison[0] == '1';
  }

  void* allocate(size_t nbytes, int device) override {
    VITDDP_CHECK(device >= 0 && device < kMaxDevices, "cuda device index ", device, " out of range");
    std::call_once(pool_once_[device], [&] { configure_pool(device); });
    int previous = current_device();
    if (previous != device) set_device(device);
    void* ptr = nullptr;
    cudaStream_t stream = current_stream();
    cudaError_t err = cudaMallocAsync(&ptr, nbytes, stream);
    if (err == cudaSuccess && poison_) err = cudaMemsetAsync(ptr, 0xFF, nbytes, stream);
    if (previous != device) set_device(previous);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw Error("out of memory on cuda:" + std::to_string(device) + " allocating " + std::to_string(nbytes) +
                  " bytes (" + std::to_string(bytes_[device].current()) + " bytes in use)");
    }
    CUDA_CHECK(err);
    if (t_ledger) {  // graph memory: not counted here (Note [Allocations under capture])
      t_ledger->made.insert(ptr);
      t_ledger->made_bytes += nbytes;
      return ptr;
    }
    bytes_[device].add(nbytes);
    return ptr;
  }

  void deallocate(void* ptr, size_t nbytes, int device) noexcept override {
    if (t_ledger) {
      if (t_ledger->made.erase(ptr) == 0) {
        try {
          t_ledger->held.push_back({ptr, nbytes, device});
          return;  // freed by release_held_frees()
        } catch (...) {
          return;  // no memory to note it: leaked, never freed while the graph may read it
        }
      }
      t_ledger->made_bytes -= nbytes;
      // A failed capture's blocks were never really allocated (its graph is dropped).
      cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
      cudaStream_t stream = nullptr;
      try {
        stream = current_stream();
      } catch (...) {
      }
      if (stream && cudaStreamIsCapturing(stream, &capture) == cudaSuccess &&
          capture == cudaStreamCaptureStatusInvalidated)
        return;
      free_on_current_stream(ptr, device);  // a free node of the graph; never counted
      return;
    }
    if (g_any_dropped.load()) {
      std::lock_guard<std::mutex> lock(g_dropped_mutex);
      if (g_dropped.erase(ptr) > 0) return;
    }
    free_on_current_stream(ptr, device);
    bytes_[device].sub(nbytes);
  }

  static void free_on_current_stream(void* ptr, int device) noexcept {
    DeviceScope scope(device);
    cudaStream_t stream = nullptr;
    try {
      stream = current_stream();
    } catch (...) {
    }
    CUDA_WARN(cudaFreeAsync(ptr, stream));
  }

  size_t current_bytes(int device) const override { return bytes_[device].current(); }
  size_t peak_bytes(int device) const override { return bytes_[device].peak(); }
  void reset_peak(int device) override { bytes_[device].reset_peak(); }

 private:
  static void configure_pool(int device) {
    cudaMemPool_t pool = nullptr;
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t keep_everything = UINT64_MAX;
    CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything));
    // A block freed on one stream is not handed to another with a dependency the driver adds:
    // the compute stream would then wait, unseen, for PowerSGD's side stream and the all-reduce
    // that stream waits for (Note [PowerSGD beside backward]). Reuse across streams stays
    // allowed once the free has completed, or when an event already orders the two streams.
    int no_hidden_waits = 0;
    CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &no_hidden_waits));
  }

  bool poison_ = false;
  std::array<std::once_flag, kMaxDevices> pool_once_;
  std::array<ByteCounter, kMaxDevices> bytes_;
};

}  // namespace

Allocator& device_allocator() {
  static AsyncPoolAllocator allocator;
  return allocator;
}

void set_capture_ledger(CaptureLedger* ledger) { t_ledger = ledger; }

void drop_capture_blocks(CaptureLedger& ledger) {
  std::lock_guard<std::mutex> lock(g_dropped_mutex);
  g_dropped.insert(ledger.made.begin(), ledger.made.end());
  if (!g_dropped.empty()) g_any_dropped.store(true);
  ledger.made.clear();
  ledger.made_bytes = 0;
}

void release_held_frees(CaptureLedger& ledger) noexcept {
  CaptureLedger* const previous = t_ledger;
  t_ledger = nullptr;  // these are real frees
  for (const CaptureLedger::Held& h : ledger.held) device_allocator().deallocate(h.ptr, h.nbytes, h.device);
  ledger.held.clear();
  t_ledger = previous == &ledger ? nullptr : previous;
}

}  // namespace vitddp::cuda
