#include "distributed/nccl/peer_rings.h"

#include <unistd.h>

#include <cuda_runtime.h>

#include <cstdio>
#include <sstream>

#include "distributed/file_store.h"
#include "framework/core/error.h"
#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"

namespace vitddp {

// Note [Rings in peer memory]
// With the rings in pinned host memory (--host-copy-allreduce alone) every chunk crosses PCIe
// twice, GPU -> host -> GPU: right for GPUs that cannot reach each other. GPUs joined by NVLink
// can take the same plan (distributed/host_copy/copy_plan.h) with the ring from -> to in `to`'s
// memory: the sender's copy engine writes its chunk over NVLink into the receiver's slot, and
// the receiver's copy engine moves it within its own memory. The flags stay in shared host
// memory, where both GPUs' front ends poll them (a stream write after a copy is ordered after
// it, with a system-wide fence, so a receiver that sees `full` sees the chunk). The point, as on
// PCIe: NCCL's all-reduce keeps 24 blocks on the SMs beside backward for the whole collective,
// this moves the bytes with no kernel but the owner's short addition per chunk.
namespace {

std::string to_hex(const void* bytes, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char b = static_cast<const unsigned char*>(bytes)[i];
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

void from_hex(const std::string& hex, void* bytes, size_t n) {
  VITDDP_ASSERT(hex.size() == 2 * n, "peer ring handle of ", hex.size(), " hex digits");
  auto value = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (size_t i = 0; i < n; ++i)
    static_cast<unsigned char*>(bytes)[i] = static_cast<unsigned char>(value(hex[2 * i]) * 16 + value(hex[2 * i + 1]));
}

// What a rank publishes: its process, its device, its rings' address and IPC handle.
struct Published {
  long pid = 0;
  int device = -1;
  unsigned long long address = 0;
  std::string handle;
};

std::string publish(const Published& p) {
  std::ostringstream out;
  out << p.pid << ' ' << p.device << ' ' << p.address << ' ' << p.handle;
  return out.str();
}

Published parse(const std::string& text) {
  Published p;
  std::istringstream in(text);
  in >> p.pid >> p.device >> p.address >> p.handle;
  VITDDP_ASSERT(!in.fail(), "peer ring record '", text, "'");
  return p;
}

[[noreturn]] void unreachable(int rank, int peer, const char* call, cudaError_t status) {
  throw Error(detail::concat("--copy-rings peer needs GPUs that reach each other's memory (NVLink or PCIe peer "
                             "access): rank ", rank, " cannot map rank ", peer, "'s rings (", call, ": ",
                             cudaGetErrorString(status), "); use --copy-rings host"));
}

}  // namespace

PeerRings::PeerRings(int rank, int world, int device, size_t ring_bytes, const FileStore& store, const std::string& prefix,
                     std::chrono::milliseconds timeout)
    : rank_(rank),
      world_(world),
      device_(device),
      ring_bytes_(ring_bytes),
      store_(store),
      prefix_(prefix + "peer-rings/"),
      timeout_(timeout),
      rings_(world) {
  VITDDP_ASSERT(world >= 2 && rank >= 0 && rank < world && ring_bytes > 0, "PeerRings: rank ", rank, " of ", world);
  try {
    connect();
  } catch (...) {
    // The run ends with this error: rings a peer may have mapped stay allocated until it does.
    close_peers();
    if (!published_ && rings_[rank_].base) {
      cuda::DeviceScope scope(device_);
      CUDA_WARN(cudaFree(rings_[rank_].base));
    }
    throw;
  }
}

void PeerRings::connect() {
  const int rank = rank_, world = world_, device = device_;
  cuda::DeviceScope scope(device);
  CUDA_CHECK(cudaMalloc(&rings_[rank].base, static_cast<size_t>(world - 1) * ring_bytes_));
  cudaIpcMemHandle_t handle{};
  CUDA_CHECK(cudaIpcGetMemHandle(&handle, rings_[rank].base));
  Published mine;
  mine.pid = static_cast<long>(::getpid());
  mine.device = device;
  mine.address = reinterpret_cast<unsigned long long>(rings_[rank].base);
  mine.handle = to_hex(&handle, sizeof(handle));
  store_.set(prefix_ + std::to_string(rank), publish(mine));
  published_ = true;
  for (int q = 0; q < world; ++q) {
    if (q == rank) continue;
    const Published theirs = parse(store_.get(prefix_ + std::to_string(q), timeout_));
    if (theirs.pid == mine.pid) {
      // Threads of one process (the GPU tests): the address is valid here; peer access makes
      // the copies go over the link, not through host memory.
      int can = 0;
      CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, theirs.device));
      if (!can) unreachable(rank, q, "cudaDeviceCanAccessPeer", cudaErrorPeerAccessUnsupported);
      const cudaError_t status = cudaDeviceEnablePeerAccess(theirs.device, 0);
      if (status == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();  // not an error here; clear what the call recorded
      } else if (status != cudaSuccess) {
        unreachable(rank, q, "cudaDeviceEnablePeerAccess", status);
      }
      rings_[q].base = reinterpret_cast<char*>(theirs.address);
    } else {
      cudaIpcMemHandle_t peer_handle{};
      from_hex(theirs.handle, &peer_handle, sizeof(peer_handle));
      void* mapped = nullptr;
      const cudaError_t status = cudaIpcOpenMemHandle(&mapped, peer_handle, cudaIpcMemLazyEnablePeerAccess);
      if (status != cudaSuccess) {
        (void)cudaGetLastError();
        unreachable(rank, q, "cudaIpcOpenMemHandle", status);
      }
      rings_[q].base = static_cast<char*>(mapped);
      rings_[q].opened_by_ipc = true;
    }
  }
}

PeerRings::~PeerRings() {
  close_peers();
  release();
}

void PeerRings::close_peers() noexcept {
  cuda::DeviceScope scope(device_);
  for (int q = 0; q < world_; ++q) {
    if (q == rank_) continue;
    if (rings_[q].opened_by_ipc) CUDA_WARN(cudaIpcCloseMemHandle(rings_[q].base));
    rings_[q] = Mapping{};
  }
}

void PeerRings::release() noexcept {
  if (!rings_[rank_].base) return;
  // Freeing memory a peer still maps is undefined (and its copies may still write there): wait
  // until every peer has closed ours, within the timeout.
  bool peers_closed = true;
  try {
    store_.set(prefix_ + "closed/" + std::to_string(rank_), "1");
    for (int q = 0; q < world_; ++q)
      if (q != rank_) store_.get(prefix_ + "closed/" + std::to_string(q), timeout_);
  } catch (const std::exception& e) {
    peers_closed = false;
    std::fprintf(stderr, "vitddp: warning: --copy-rings peer: leaving this rank's rings allocated (%s)\n", e.what());
  }
  if (peers_closed) {
    cuda::DeviceScope scope(device_);
    CUDA_WARN(cudaFree(rings_[rank_].base));
  }
  rings_[rank_] = Mapping{};
}

char* PeerRings::ring(int from, int to) const {
  const int index = from < to ? from : from - 1;  // `to`'s rings, one per other rank, in rank order
  return rings_[to].base + static_cast<size_t>(index) * ring_bytes_;
}

}  // namespace vitddp
