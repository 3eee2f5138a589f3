// HostCopyTransport: all-reduce between the GPUs of one host through pinned shared host memory,
// moved by the GPUs' copy engines and paced by stream memory operations, with no kernel waiting
// on the link and no host thread in the loop (Note [Host-copy all-reduce] in the .cpp). It is
// what ProcessGroupNccl's all-reduces use under `transport host-copy`, for GPUs without peer
// access (NCCL_P2P_DISABLE=1, PCIe servers whose GPUs cannot reach each other), where NCCL's
// shared-memory transport keeps kernels spinning on SMs beside backward for the whole copy.
//
// Every rank of the group must live on this host (checked at construction) and issue the same
// all-reduces in the same order, as with NCCL. A CUDA graph may capture its all-reduces if the
// capture starts and ends with aligned rings (align_rings()) and the rings are aligned again
// before every replay (Note [Replaying host copies]).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "distributed/host_copy/copy_plan.h"
#include "distributed/host_copy/shm_segment.h"
#include "distributed/process_group.h"
#include "framework/cuda/stream.h"

namespace vitddp {

struct HostCopyOptions {
  int rank = 0;
  int world_size = 2;
  int device = 0;
  std::string rendezvous;  // the process group's file store folder
  std::string key_prefix;  // unique per group in that folder ("nccl0/")
  std::chrono::milliseconds timeout{300000};
  int64_t chunk_bytes = 4 << 20;  // one ring slot
  int slots = 4;                  // slots per ring (each ordered pair of ranks has one ring)
  // The owner's additions on a stream of their own beside the receiving copies (false: on the
  // receiving stream); Note [Reductions beside the copies] in distributed/host_copy/copy_plan.cpp.
  bool reduce_beside = false;
};

class HostCopyTransport {
 public:
  // Makes this rank's segment, maps and registers every peer's (through the file store, within
  // the timeout), and checks that they all run on this host. Throws a clear error otherwise.
  explicit HostCopyTransport(const HostCopyOptions& options);
  // The caller must have made sure no stream still runs this transport's work (after a failure:
  // release_waits() first, then wait for the streams); unregisters and unmaps the segments.
  ~HostCopyTransport();
  HostCopyTransport(const HostCopyTransport&) = delete;
  HostCopyTransport& operator=(const HostCopyTransport&) = delete;

  static bool supports(DType dtype);
  // Enqueues the all-reduce of `count` elements at `data` (on this rank's device): on return
  // `stream` waits for its end; the host never blocks. Its copies start after `stream`'s work,
  // or, given `inputs_ready`, after that event and this transport's earlier collectives only, so
  // that back-to-back all-reduces overlap (Note [Back-to-back host copies]); the caller then
  // vouches that nothing else on `stream` must come first.
  void allreduce(void* data, int64_t count, DType dtype, ReduceOp op, cudaStream_t stream,
                 cudaEvent_t inputs_ready = nullptr);
  // Flag-only uses of the rings, on `stream` like an all-reduce, until every ring is back at the
  // flags it started with (host_copy::pad_rings); nothing when it already is. Every rank must
  // call it at the same point.
  void align_rings(cudaStream_t stream);
  // After the group failed: satisfies every wait already enqueued on this rank's copy streams
  // (setting the release bit on the flags they watch, which only this rank waits on), so that they drain instead
  // of waiting forever for a peer that is gone. The buffers' contents are then garbage.
  // It also raises this rank's failed flag first, which peers see through peer_failed().
  void release_waits() noexcept;
  // A peer that released its waits after a failure (its last all-reduces carried garbage): the
  // rank it names, or -1. Read from host memory; the group's checks call it.
  int peer_failed() const noexcept;
  // Whether the transport's streams are idle (cudaStreamQuery on each).
  bool idle() const;

 private:
  struct Mapped {
    host_copy::ShmSegment segment;
    void* device_view = nullptr;  // the device's address of the registered segment
    bool registered = false;
  };
  size_t segment_bytes() const;
  size_t ring_offset(int from, int to) const;  // in `from`'s segment
  uint32_t* flag(int owner, size_t index) const;             // the index-th flag of owner's header
  uint32_t* full_flag(int owner, int peer, int slot) const;  // ring owner -> peer, in owner's segment
  uint32_t* free_flag(int owner, int peer, int slot) const;  // ring peer -> owner, in owner's segment
  uint32_t* failed_flag(int owner) const;                     // set by release_waits(), in owner's segment
  // Issues `plan` on the transport's streams, after `inputs_ready` or, when null, after `stream`'s
  // work; `stream` waits for its end.
  void issue(const host_copy::CopyPlan& plan, char* buffer, DType dtype, float scale, cudaStream_t stream,
             cudaEvent_t inputs_ready);
  void run(const host_copy::CopyStep& step, char* buffer, size_t element_bytes, DType dtype, float scale);

  HostCopyOptions options_;
  std::vector<Mapped> segments_;  // by rank; segments_[rank] is this rank's
  host_copy::RingCounters counters_;
  cuda::Stream send_stream_;
  cuda::Stream recv_stream_;
  cuda::Stream reduce_stream_;  // the additions, with reduce_beside
  cuda::Event fork_, send_done_, recv_done_, reduce_done_;
  cuda::Event reduces_caught_up_;     // the reducing stream's earlier work, for the receiving stream
  std::vector<cuda::Event> reduced_;  // per chunk of this rank's part (grown as needed)
  std::vector<cuda::Event> staged_, staging_free_;  // per staging chunk (Note [Reductions beside the copies])
  // The last collective's buffer, and whether this rank reduced chunks of it: the next may start
  // before its end only if it touches other memory (Note [Back-to-back host copies]).
  host_copy::LastCollective last_;
  std::vector<void*> staging_;  // host_copy::kStagingChunks chunks on the device
};

}  // namespace vitddp
