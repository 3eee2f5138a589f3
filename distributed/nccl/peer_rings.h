// PeerRings: the host-copy all-reduce's rings in GPU memory, for --copy-rings peer (Note
// [Rings in peer memory] in the .cpp). Each rank allocates the rings that come in to it, one per
// peer, on its own GPU; every peer maps them (CUDA IPC between processes, the plain address
// between threads of one process, with peer access enabled), so that a sender's copy engine
// writes a chunk straight into the receiver's memory over NVLink and no SM takes part.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "distributed/file_store.h"

namespace vitddp {

class PeerRings {
 public:
  // Allocates this rank's incoming rings ((world - 1) * ring_bytes on `device`), publishes them
  // under `prefix` in `store`, and maps every peer's, each within `timeout`. Throws a one-line
  // error when the GPUs cannot reach each other's memory.
  PeerRings(int rank, int world, int device, size_t ring_bytes, const FileStore& store, const std::string& prefix,
            std::chrono::milliseconds timeout);
  // The caller must have made sure no stream of this rank still copies into or out of the rings.
  // Closes the peers' rings, then frees this rank's once every peer has closed them (a peer's
  // copy engine may write there until it has): a peer that does not say so within the timeout
  // leaves them allocated, with a warning, rather than written after the free.
  ~PeerRings();
  PeerRings(const PeerRings&) = delete;
  PeerRings& operator=(const PeerRings&) = delete;

  // The ring `from` -> `to` (in `to`'s memory), as this process addresses it.
  char* ring(int from, int to) const;

 private:
  struct Mapping {
    char* base = nullptr;
    bool opened_by_ipc = false;  // cudaIpcOpenMemHandle'd: closed, not freed
  };
  void connect();
  void close_peers() noexcept;  // unmaps the peers' rings
  void release() noexcept;      // after close_peers(): frees this rank's rings once no peer maps them

  int rank_, world_, device_;
  size_t ring_bytes_;
  FileStore store_;
  std::string prefix_;  // the group's keys in store_
  std::chrono::milliseconds timeout_;
  std::vector<Mapping> rings_;  // by owner (receiver); rings_[rank_] is this rank's allocation
  bool published_ = false;      // peers may map this rank's rings
};

}  // namespace vitddp
