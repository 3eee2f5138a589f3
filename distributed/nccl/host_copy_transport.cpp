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
// Decision: without peer access, an all-reduce is a fixed list of stream operations
// (distributed/host_copy/copy_plan.h) on three streams of this rank: copy-engine copies between
// the device and ring slots in pinned shared host memory, paced by stream memory operations
// (cuStreamWaitValue32 / cuStreamWriteValue32) on flags in that memory, which the GPU's front end
// polls; the only kernels are the owner's additions. Reason: NCCL's shared-memory transport keeps
// thread blocks spinning beside backward for the whole collective, slowing it, and its copy-engine
// mode (NCCL_SHM_USE_CUDA_MEMCPY) stalled every training run we tried with NCCL 2.28, PyTorch's
// too (docs/performance.md). Invariants: a stream write fences the copies before it system-wide
// (CU_STREAM_WRITE_VALUE_DEFAULT), so a peer that sees `full` sees the chunk; copy_plan.h's rounds
// rule out deadlock within one context, so ranks are processes (two rank threads on one GPU can
// hang; HostCopyTransportGpu runs two processes on one). On failure the watchdog calls
// release_waits(), and the streams drain.

// Note [Replaying host copies]
// A flag holds the parity of its slot's last use, so its waits carry fixed values; a CUDA graph
// replays them unchanged. That is right only if every replay starts with the flags as they were
// at the capture: the capture begins and ends with aligned rings (every ring's use count a
// multiple of 2 * slots, padded with flag-only uses), and eager all-reduces between replays (a
// loss or a flag all-reduced) are followed by the padding before the next replay
// (ProcessGroupNccl::align_host_copy_rings).

// Note [Back-to-back host copies]
// Decision (expert key host-copy-overlap, off until measured on two GPUs): given the event after
// which the buffer is ready (allreduce()'s `inputs_ready`), a collective's copies start without
// forking from the comm stream, so its sends run while the last one's final chunks come in.
// Reason: forked, every collective leaves the link half idle at both ends (its first receive
// waits for the peer's first chunk, its last chunk comes after the sends are done), once per
// bucket. Invariants: each copy stream runs its steps of every collective in issue order and the
// rounds stay one sequence, so Note [Host-copy all-reduce]'s no-deadlock argument holds for eager
// issue (a graph's replay does not follow issue order: HostCopyTrainGpu and HostCopyGpu show its
// replays do not hang); the caller's stream still waits for each collective's end. The buffers must be apart and the
// last collective must have reduced a part here (its sends waited for its reductions, hence for
// all earlier receives); else the next forks from the stream (host_copy::may_overlap).

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
      VITDDP_CHECK(status == cudaDriverEntryPointSuccess && *fn, "transport host-copy: the CUDA driver has no ",
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
                             " (transport host-copy needs stream memory operations on host memory)"),
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
    VITDDP_CHECK(theirs == host, "transport host-copy needs every rank on one host: rank ", q, " runs on '", theirs,
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
