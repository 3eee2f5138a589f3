#include "distributed/nccl/host_copy_transport.h"

#include <cuda.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <sstream>

#include "distributed/file_store.h"
#include "framework/core/error.h"
#include "framework/cuda/check.h"
#include "framework/cuda/chunk_sum.h"

namespace vitddp {

// Note [Host-copy all-reduce]
// Without peer access, NCCL moves an all-reduce through host shared memory with kernels: a few
// thread blocks per channel copy and reduce through pinned buffers and spin on flags for the
// whole collective, beside backward's kernels (docs/performance.md: backward runs 7-14% slower
// beside them). NCCL's own copy-engine mode (NCCL_SHM_USE_CUDA_MEMCPY) drives the copies from a
// host proxy thread, and stalled every training run we tried, PyTorch's too, with NCCL 2.28.
// Here the whole collective is a fixed list of stream operations (distributed/host_copy/
// copy_plan.h), on three streams of this rank:
//   send: wait for the slot's `free` flag -> copy engine: device chunk -> slot -> set `full`
//   recv: wait for the slot's `full` flag -> copy engine: slot -> device -> set `free`
//   reduce: [add a received chunk of this rank's part in] (Note [Reductions beside the copies])
// The waits and writes are stream memory operations (cuStreamWaitValue32 with
// CU_STREAM_WAIT_VALUE_AND / cuStreamWriteValue32) on flags in the same mapped shared memory: the
// GPU's front end polls them, no SM and no host thread takes part, and the only kernels are the
// owner's additions (one short pass per chunk). A stream write comes after the copies before it
// on its stream, with a system-wide fence (CU_STREAM_WRITE_VALUE_DEFAULT), so a peer that sees
// `full` sees the chunk. Steps are issued in rounds that every rank shares, so a wait never
// depends on work issued after it anywhere: streams that share a hardware queue cannot deadlock.
// That holds for one rank's streams; two ranks as threads of one process on one GPU share its
// context's hardware queues, where one rank's wait can stand before the other's signal in issue
// order (such a test hung at f753006 and 6efe99c, even with CUDA_DEVICE_MAX_CONNECTIONS=32). Ranks
// are processes, each on its own GPU (NCCL requires that of ProcessGroupNccl anyway); the
// transport's own test puts two processes on one GPU (HostCopyTransportGpu; passes at abc4852).
// Failure: a peer that dies leaves our waits unsatisfied; the group's watchdog times the
// collective out like any other and calls release_waits(), which raises this rank's failed flag
// (peers then fail too, instead of trusting what our drained streams send) and sets the release
// bit on the flags our streams wait on, from the host (it is host memory), so they drain.
//
// Note [Replaying host copies]
// A flag holds the parity of its slot's last use, so its waits carry fixed values; a CUDA graph
// replays them unchanged. That is right only if every replay starts with the flags as they were
// at the capture: the capture begins and ends with aligned rings (every ring's use count a
// multiple of 2 * slots, padded with flag-only uses), and eager all-reduces between replays (a
// loss or a flag all-reduced) are followed by the padding before the next replay
// (ProcessGroupNccl::align_host_copy_rings).
//
// Note [Back-to-back host copies]
// (--host-copy-overlap; off by default until measured on two GPUs.) An all-reduce's copies
// cannot keep both directions of the link busy at its ends: its first receive waits for the
// peer's first chunk to reach host memory, and its last chunk is received
// after the send stream has nothing left. Forked from the comm stream (the `stream` argument),
// which waits for the previous all-reduce's end, every collective paid both: about 0.11 ms each
// by a fit to the bf16 probe's 25 and 100 MiB rates (docs/performance.md), up to 1.5 ms of an
// 18.7 ms step in DDP's 13 buckets with P2P off (predicted, not traced). The copy streams need
// no such fork: each runs its steps of every collective in issue order, the flags pace them
// against the peer, and a collective's streams wait for each other only through events marked
// earlier (kWaitReduced, the staging chunks' and the reductions' catch-up). Given the event
// after which the buffer is ready (ProcessGroupNccl passes the caller's handshake event when no
// NCCL call went on its stream
// since the last host copy), the next collective's sends start while the last one's final
// chunks come in. Its receives still wait for their own turn on the receive stream, and the
// caller's stream still waits for each collective's end, so its completion event means what it
// meant. The rounds stay one sequence across collectives (the ring counters go on), so the
// no-deadlock argument of Note [Host-copy all-reduce] holds across them for eager issue. A CUDA
// graph's replay does not follow issue order: the driver places its independent branches on
// hardware queues itself, and without a join between collectives there are more of them (three
// chains per collective, no longer joined between collectives); the two-GPU graph tests
// (HostCopyTrainGpu, HostCopyGpu) are what shows the replays do not hang.
// What may overlap: the next collective's sends read its buffer while the last one's receives
// write the last buffer, so the two must be apart (else it forks from the caller's stream, as
// before: the same tensor all-reduced twice without a wait stays in order). Anything older has
// finished: the last collective's sends waited for its reductions (kWaitReduced), which come after
// its receives began, so after all earlier receives on the receive stream; when this rank reduced
// nothing of it (a buffer too small to have a part here) or it was flag-only padding, the next
// one forks from the stream too (host_copy::may_overlap).
namespace {

constexpr size_t kFlagStride = 128;  // a flag per cache line pair: no false sharing
constexpr size_t kPage = 4096;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Header: `full` flags (per peer and slot), `free` flags (per peer and slot), then the failed flag.
size_t header_bytes(int world, int slots) { return round_up((2 * world * slots + 1) * kFlagStride, kPage); }

// The driver's stream memory operations, looked up through the runtime: linking libcuda would
// keep the binaries (and the GPU tests, which skip themselves) from starting on a machine
// without the driver.
struct DriverMemOps {
  using WaitValue = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  using WriteValue = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  WaitValue wait_value32 = nullptr;
  WriteValue write_value32 = nullptr;
};

const DriverMemOps& driver_mem_ops() {
  static const DriverMemOps ops = [] {
    DriverMemOps found;
    auto lookup = [](const char* symbol, void** fn) {
      cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
      CUDA_CHECK(cudaGetDriverEntryPointByVersion(symbol, fn, 12000, cudaEnableDefault, &status));
      VITDDP_CHECK(status == cudaDriverEntryPointSuccess && *fn, "--host-copy-allreduce: the CUDA driver has no ",
                   symbol, " (it needs a driver for CUDA 12 or newer)");
    };
    lookup("cuStreamWaitValue32", reinterpret_cast<void**>(&found.wait_value32));
    lookup("cuStreamWriteValue32", reinterpret_cast<void**>(&found.write_value32));
    return found;
  }();
  return ops;
}

void cu_check(CUresult result, const char* call) {
  if (result == CUDA_SUCCESS) return;
  throw Error(detail::concat("CUDA driver error: ", call, " failed with CUresult ", static_cast<int>(result),
                             " (--host-copy-allreduce needs stream memory operations on host memory)"),
              ErrorKind::kInternal);
}

std::string hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

std::string make_token() {
  std::random_device random;
  std::ostringstream token;
  token << std::hex << ::getpid() << "-" << random() << random();
  return token.str();
}

}  // namespace

bool HostCopyTransport::supports(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
}

size_t HostCopyTransport::segment_bytes() const {
  const size_t header = header_bytes(options_.world_size, options_.slots);
  return header + static_cast<size_t>(options_.world_size - 1) * options_.slots * options_.chunk_bytes;
}

size_t HostCopyTransport::ring_offset(int from, int to) const {
  const size_t header = header_bytes(options_.world_size, options_.slots);
  const int ring = to < from ? to : to - 1;  // rings to every other rank, in rank order
  return header + static_cast<size_t>(ring) * options_.slots * options_.chunk_bytes;
}

uint32_t* HostCopyTransport::flag(int owner, size_t index) const {
  return reinterpret_cast<uint32_t*>(static_cast<char*>(segments_[owner].segment.data()) + index * kFlagStride);
}

uint32_t* HostCopyTransport::full_flag(int owner, int peer, int slot) const {
  return flag(owner, peer * options_.slots + slot);
}

uint32_t* HostCopyTransport::free_flag(int owner, int peer, int slot) const {
  return flag(owner, (options_.world_size + peer) * options_.slots + slot);
}

uint32_t* HostCopyTransport::failed_flag(int owner) const { return flag(owner, 2 * options_.world_size * options_.slots); }

HostCopyTransport::HostCopyTransport(const HostCopyOptions& options)
    : options_(options), counters_(options.world_size) {
  const int rank = options.rank, world = options.world_size;
  VITDDP_CHECK(world >= 2 && rank >= 0 && rank < world, "HostCopyTransport: rank ", rank, " of ", world);
  VITDDP_CHECK(options.chunk_bytes >= 4096 && options.chunk_bytes % 64 == 0 && options.slots >= 1,
               "HostCopyTransport: chunk of ", options.chunk_bytes, " bytes and ", options.slots, " slots");
  cuda::DeviceScope scope(options.device);
  driver_mem_ops();  // a driver without them fails here, at start
  FileStore store(options.rendezvous);
  const std::string prefix = options.key_prefix + "hostcopy/";

  // Every rank on this host: shared memory does not cross machines.
  const std::string host = hostname();
  store.set(prefix + "host/" + std::to_string(rank), host);
  for (int q = 0; q < world; ++q) {
    const std::string theirs = store.get(prefix + "host/" + std::to_string(q), options.timeout);
    VITDDP_CHECK(theirs == host, "--host-copy-allreduce needs every rank on one host: rank ", q, " runs on '", theirs,
                 "', rank ", rank, " on '", host, "'");
  }
  if (rank == 0) store.set(prefix + "token", make_token());
  const std::string token = store.get(prefix + "token", options.timeout);
  auto name_of = [&](int q) { return "/vitddp-" + token + "-" + std::to_string(q); };

  segments_.resize(world);
  auto map = [&](int q, host_copy::ShmSegment segment) {
    Mapped& m = segments_[q];
    m.segment = std::move(segment);
    CUDA_CHECK(cudaHostRegister(m.segment.data(), m.segment.size(), cudaHostRegisterPortable | cudaHostRegisterMapped));
    m.registered = true;
    CUDA_CHECK(cudaHostGetDevicePointer(&m.device_view, m.segment.data(), 0));
  };
  map(rank, host_copy::ShmSegment::create(name_of(rank), segment_bytes()));
  for (int q = 0; q < world; ++q)
    for (int slot = 0; slot < options.slots; ++slot) {
      *full_flag(rank, q, slot) = host_copy::kInitialFlag;
      *free_flag(rank, q, slot) = host_copy::kInitialFlag;
    }
  store.set(prefix + "made/" + std::to_string(rank), "1");
  for (int q = 0; q < world; ++q) {
    if (q == rank) continue;
    store.get(prefix + "made/" + std::to_string(q), options.timeout);
    map(q, host_copy::ShmSegment::open(name_of(q), segment_bytes()));
  }
  // Once every rank has mapped every segment the names can go: nothing is left in /dev/shm,
  // whatever happens to the processes later.
  store.set(prefix + "opened/" + std::to_string(rank), "1");
  for (int q = 0; q < world; ++q) store.get(prefix + "opened/" + std::to_string(q), options.timeout);
  segments_[rank].segment.unlink();

  send_stream_ = cuda::Stream::create(options.device, cuda::communication_priority());
  recv_stream_ = cuda::Stream::create(options.device, cuda::communication_priority());
  reduce_stream_ = cuda::Stream::create(options.device, cuda::communication_priority());
  fork_ = cuda::Event::create();
  send_done_ = cuda::Event::create();
  recv_done_ = cuda::Event::create();
  reduce_done_ = cuda::Event::create();
  reduces_caught_up_ = cuda::Event::create();
  for (int b = 0; b < host_copy::kStagingChunks; ++b) {
    staged_.push_back(cuda::Event::create());
    staging_free_.push_back(cuda::Event::create());
    staging_.push_back(nullptr);
    CUDA_CHECK(cudaMalloc(&staging_.back(), static_cast<size_t>(options.chunk_bytes)));
  }
}

HostCopyTransport::~HostCopyTransport() {
  cuda::DeviceScope scope(options_.device);
  for (void* chunk : staging_)
    if (chunk) CUDA_WARN(cudaFree(chunk));
  for (Mapped& m : segments_)
    if (m.registered) CUDA_WARN(cudaHostUnregister(m.segment.data()));
}

int HostCopyTransport::peer_failed() const noexcept {
  for (int q = 0; q < options_.world_size; ++q)
    if (q != options_.rank && segments_[q].segment.data() && __atomic_load_n(failed_flag(q), __ATOMIC_ACQUIRE) != 0)
      return q;
  return -1;
}

bool HostCopyTransport::idle() const {
  for (const cuda::Stream* s : {&send_stream_, &recv_stream_, &reduce_stream_}) {
    if (!s->get()) continue;
    const cudaError_t status = cudaStreamQuery(s->get());
    if (status == cudaErrorNotReady) return false;
  }
  return true;
}

void HostCopyTransport::release_waits() noexcept {
  const int me = options_.rank;
  // Peers must not take what our drained streams send for a result: they see the flag first.
  if (segments_.size() > static_cast<size_t>(me) && segments_[me].segment.data())
    __atomic_store_n(failed_flag(me), 1u, __ATOMIC_SEQ_CST);
  for (int q = 0; q < options_.world_size; ++q) {
    if (q == me || !segments_[q].segment.data()) continue;
    // The flags this rank's streams wait on (written by the peer): the release bit ends every wait.
    for (int slot = 0; slot < options_.slots; ++slot) {
      __atomic_fetch_or(full_flag(q, me, slot), host_copy::kReleased, __ATOMIC_SEQ_CST);
      __atomic_fetch_or(free_flag(q, me, slot), host_copy::kReleased, __ATOMIC_SEQ_CST);
    }
  }
}

void HostCopyTransport::run(const host_copy::CopyStep& step, char* buffer, size_t element_bytes, DType dtype,
                            float scale) {
  using Kind = host_copy::CopyStep::Kind;
  const int me = options_.rank;
  cudaStream_t stream = step.stream == host_copy::CopyStep::Stream::kSend   ? send_stream_.get()
                        : step.stream == host_copy::CopyStep::Stream::kRecv ? recv_stream_.get()
                                                                             : reduce_stream_.get();
  auto device_address = [&](int owner, const uint32_t* flag) {
    const char* base = static_cast<const char*>(segments_[owner].segment.data());
    return reinterpret_cast<CUdeviceptr>(static_cast<char*>(segments_[owner].device_view) +
                                         (reinterpret_cast<const char*>(flag) - base));
  };
  auto wait = [&](int owner, const uint32_t* flag) {
    cu_check(driver_mem_ops().wait_value32(stream, device_address(owner, flag), step.mask, CU_STREAM_WAIT_VALUE_AND),
             "cuStreamWaitValue32");
  };
  auto write = [&](const uint32_t* flag) {
    cu_check(driver_mem_ops().write_value32(stream, device_address(me, flag), step.value, CU_STREAM_WRITE_VALUE_DEFAULT),
             "cuStreamWriteValue32");
  };
  auto slot = [&](int from, int to) {
    return static_cast<char*>(segments_[from].segment.data()) + ring_offset(from, to) +
           static_cast<size_t>(step.slot) * options_.chunk_bytes;
  };
  const size_t bytes = static_cast<size_t>(step.count) * element_bytes;
  char* at = buffer + static_cast<size_t>(step.offset) * element_bytes;
  switch (step.kind) {
    case Kind::kWaitFree: return wait(step.peer, free_flag(step.peer, me, step.slot));
    case Kind::kCopyToRing:
      CUDA_CHECK(cudaMemcpyAsync(slot(me, step.peer), at, bytes, cudaMemcpyDeviceToHost, stream));
      return;
    case Kind::kSignalFull: return write(full_flag(me, step.peer, step.slot));
    case Kind::kWaitFull: return wait(step.peer, full_flag(step.peer, me, step.slot));
    case Kind::kCopyFromRing:
      CUDA_CHECK(cudaMemcpyAsync(step.to_staging ? staging_[step.staging] : at, slot(step.peer, me), bytes,
                                 cudaMemcpyHostToDevice, stream));
      return;
    case Kind::kSignalFree: return write(free_flag(me, step.peer, step.slot));
    case Kind::kReduce:
      return cuda::chunk_sum_forward(at, staging_[step.staging], step.count, dtype, step.last ? scale : 1.0f, stream);
    case Kind::kMarkReduced: return reduced_[step.chunk].record(stream);
    case Kind::kWaitReduced: return reduced_[step.chunk].block(stream);
    case Kind::kMarkStaged: return staged_[step.staging].record(stream);
    case Kind::kWaitStaged: return staged_[step.staging].block(stream);
    case Kind::kMarkStagingFree: return staging_free_[step.staging].record(stream);
    case Kind::kWaitStagingFree: return staging_free_[step.staging].block(stream);
  }
}

void HostCopyTransport::issue(const host_copy::CopyPlan& plan, char* buffer, DType dtype, float scale,
                              cudaStream_t stream, cudaEvent_t inputs_ready) {
  cuda::DeviceScope scope(options_.device);
  while (static_cast<int64_t>(reduced_.size()) < plan.reduced_chunks) reduced_.push_back(cuda::Event::create());
  const cudaStream_t streams[] = {send_stream_.get(), recv_stream_.get(), reduce_stream_.get()};
  if (inputs_ready) {  // Note [Back-to-back host copies]
    for (cudaStream_t s : streams) CUDA_CHECK(cudaStreamWaitEvent(s, inputs_ready, 0));
  } else {
    fork_.record(stream);
    for (cudaStream_t s : streams) fork_.block(s);
  }
  // The staging chunks' last uses, on the reducing stream, come before this plan's copies into
  // them (Note [Reductions beside the copies]).
  reduces_caught_up_.record(reduce_stream_.get());
  reduces_caught_up_.block(recv_stream_.get());
  const size_t element_bytes = dtype_size(dtype);
  for (const auto& step : plan.steps) run(step, buffer, element_bytes, dtype, scale);
  send_done_.record(send_stream_.get());
  recv_done_.record(recv_stream_.get());
  reduce_done_.record(reduce_stream_.get());
  send_done_.block(stream);
  recv_done_.block(stream);
  reduce_done_.block(stream);
}

void HostCopyTransport::align_rings(cudaStream_t stream) {
  const host_copy::CopyPlan plan =
      host_copy::pad_rings(options_.world_size, options_.rank, options_.slots, counters_);
  if (plan.steps.empty()) return;
  issue(plan, nullptr, DType::kF32, 1.0f, stream, nullptr);
  last_ = {};  // flag-only uses: the next collective follows `stream` again
}

void HostCopyTransport::allreduce(void* data, int64_t count, DType dtype, ReduceOp op, cudaStream_t stream,
                                  cudaEvent_t inputs_ready) {
  VITDDP_CHECK(supports(dtype), "HostCopyTransport: ", dtype_name(dtype), " is not f32, bf16 or f16");
  const int64_t chunk_elements = options_.chunk_bytes / static_cast<int64_t>(dtype_size(dtype));
  const host_copy::CopyPlan plan =
      host_copy::plan_allreduce(options_.world_size, options_.rank, count, chunk_elements, options_.slots, counters_,
                                options_.reduce_beside);
  const float scale = op == ReduceOp::kAvg ? 1.0f / static_cast<float>(options_.world_size) : 1.0f;
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t end = begin + static_cast<uintptr_t>(count) * dtype_size(dtype);
  issue(plan, static_cast<char*>(data), dtype, scale, stream,
        host_copy::may_overlap(last_, begin, end) ? inputs_ready : nullptr);
  last_ = {begin, end, plan.reduced_chunks > 0};
}

}  // namespace vitddp
