// A transfer engine on libfabric for state that lies in many regions (parameters, optimizer and
// PowerSGD state as they lie in the arena): register regions, give peers their descriptors, then
// submit lists of writes (source region and offset, length, the peer's region and offset) that
// complete as one; small SEND/RECV messages carry the metadata (descriptors, what to write where).
// One worker thread per engine owns the queue of writes: it posts them lazily, as many at a time
// as the endpoint takes, and polls the completion queue (which also gives software providers
// such as tcp their progress, for the writes peers make into this engine's regions).
// Providers: "tcp" (libfabric's tcp with its reliable-datagram layer, ofi_rxm) and "shm" (within a
// host); where the provider addresses remote memory by offset (mr_mode without FI_MR_VIRT_ADDR,
// as tcp here) the descriptors say so and writes name offsets. Host memory only: Debian's
// libfabric has no CUDA registration, so GPU state is staged through pinned host buffers.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace vitddp::transfer {

struct FabricOptions {
  std::string provider = "tcp";  // "tcp" or "shm"
  // tcp: the address to listen on ("127.0.0.1", a namespace's veth address); empty: the
  // provider's first interface.
  std::string node;
  int worker_core = -1;          // pin the worker thread to this core; -1: leave it to the OS
};

// What a peer needs to write into a registered region.
struct RegionDescriptor {
  uint64_t key = 0;
  uint64_t base = 0;   // the address a write names at offset 0 (the region's address, or 0 by offset)
  uint64_t bytes = 0;
};

// One write of a list: `bytes` from this engine's region `src_region` at `src_offset` into the
// peer's region `dst` at `dst_offset`.
struct Write {
  int src_region = 0;
  uint64_t src_offset = 0;
  uint64_t bytes = 0;
  int peer = 0;
  RegionDescriptor dst;
  uint64_t dst_offset = 0;
};

// An engine's address and a region's descriptor as text, for the rendezvous store and messages:
// the address in hex, the descriptor as {"key", "base", "bytes"}. A malformed one is an Error.
std::string address_text(const std::vector<uint8_t>& address);
std::vector<uint8_t> address_from_text(const std::string& text);
nlohmann::json descriptor_json(const RegionDescriptor& d);
RegionDescriptor descriptor_from_json(const nlohmann::json& j);

class FabricEngine {
 public:
  // Opens the provider's fabric, domain and endpoint and starts the worker; an unknown provider
  // or one this machine lacks is an error naming it.
  explicit FabricEngine(const FabricOptions& options);
  ~FabricEngine();
  FabricEngine(const FabricEngine&) = delete;
  FabricEngine& operator=(const FabricEngine&) = delete;

  // libfabric's name of the provider ("tcp;ofi_rxm", "shm").
  std::string provider_name() const;
  // This endpoint's address, for a peer's add_peer.
  std::vector<uint8_t> address() const;
  // A peer by its address: the connection is warmed (a first message sent and completed) before
  // this returns. Returns the peer's index for Write::peer and send.
  int add_peer(const std::vector<uint8_t>& address, std::chrono::milliseconds timeout);

  // Registers [base, base + bytes) as a source of writes and, with remote_write, as a target of
  // peers' writes. Returns the region's index; the memory must outlive the engine.
  int register_region(void* base, size_t bytes, bool remote_write);
  RegionDescriptor descriptor(int region) const;
  // Unregisters a region once no write from it is queued or in flight (a failed list's unposted
  // writes are dropped by its wait); false, the region kept, when some are still in flight after
  // `timeout` (its memory must then stay mapped). Peers must not write into it any more.
  bool release_region(int region, std::chrono::milliseconds timeout);

  // Queues a list of writes and returns its ticket; every write is checked against its source
  // region and destination descriptor first (an out-of-range write is an error, nothing queued).
  uint64_t submit(std::vector<Write> writes);
  // Waits until every write of the list has completed. A failed write, or a list not complete
  // after `timeout`, is an error naming the peer and how many writes are left.
  void wait(uint64_t ticket, std::chrono::milliseconds timeout);

  // The reference `train bench transfer` measures lists against: `bytes` of region `src_region`
  // from its start into the peer's region `dst` from its start, as a plain loop of fi_writes of
  // the engine's largest piece, posted and completed from the calling thread (as many in flight
  // as the endpoint takes) without the queue or the worker, which waits meanwhile.
  void write_contiguous_loop(int src_region, int peer, const RegionDescriptor& dst, uint64_t bytes,
                             std::chrono::milliseconds timeout);

  // A message of at most kMaxMessage bytes to a peer, and the next message that came (in order of
  // arrival); recv's timeout is an error.
  static constexpr size_t kMaxMessage = 64 * 1024;
  void send(int peer, const void* data, size_t bytes);
  std::vector<uint8_t> recv(std::chrono::milliseconds timeout);
  // The same, nullopt when none came within `timeout`.
  std::optional<std::vector<uint8_t>> poll_message(std::chrono::milliseconds timeout);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace vitddp::transfer
