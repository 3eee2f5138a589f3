#include "train/bench/transfer_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "distributed/file_store.h"
#include "distributed/launcher.h"
#include "framework/core/error.h"
#include "framework/core/host_alloc.h"
#include "framework/io/file_util.h"
#include "train/checkpoint/run_state.h"
#include "train/config.h"
#include "train/exit_codes.h"
#include "train/run_setup.h"
#include "train/trainer.h"
#if VITDDP_WITH_LIBFABRIC
#include "distributed/transfer/fabric_engine.h"
#endif
#if VITDDP_WITH_CUDA
#include <cuda_runtime.h>

#include "framework/cuda/check.h"
#endif

namespace vitddp::bench {
namespace {

struct TransferFlags {
  std::string provider = "tcp";
  int repeats = 5;
};

// Takes --provider and --repeats out of argv[3..]; the rest are training flags.
std::vector<char*> split_flags(int argc, char** argv, TransferFlags* flags) {
  std::vector<char*> rest{argv[0]};
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const std::string& name) -> std::string {
      if (a.rfind(name + "=", 0) == 0) return a.substr(name.size() + 1);
      VITDDP_CHECK(i + 1 < argc, name, " needs a value");
      return argv[++i];
    };
    if (a == "--provider" || a.rfind("--provider=", 0) == 0) {
      flags->provider = value("--provider");
      VITDDP_CHECK(flags->provider == "tcp" || flags->provider == "shm", "--provider must be tcp or shm, got '",
                   flags->provider, "'");
    } else if (a == "--repeats" || a.rfind("--repeats=", 0) == 0) {
      const std::string v = value("--repeats");
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      VITDDP_CHECK(!v.empty() && *end == '\0' && n >= 1 && n <= 1000, "--repeats must be in [1, 1000], got '", v, "'");
      flags->repeats = static_cast<int>(n);
    } else {
      rest.push_back(argv[i]);
    }
  }
  return rest;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

#if VITDDP_WITH_LIBFABRIC

using transfer::FabricEngine;
using transfer::RegionDescriptor;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kAlign = 64;  // each tensor's place in the replica

struct Piece {
  std::string name;
  Tensor tensor;
  uint64_t offset = 0, bytes = 0;
};

// Page-aligned host memory, on huge pages as large tensors are (framework/core/host_alloc.h),
// touched (so no page fault lands in a timed transfer); pinned for the copy engines on a GPU run.
class HostBuffer {
 public:
  HostBuffer(uint64_t bytes, bool pinned) : bytes_(bytes), pinned_(pinned) {
#if VITDDP_WITH_CUDA
    if (pinned_) {
      CUDA_CHECK(cudaHostAlloc(&data_, bytes_, cudaHostAllocDefault));
    }
#endif
    if (!pinned_) {
      data_ = allocate_host(bytes_, 4096);
      VITDDP_CHECK(data_ != nullptr, "bench transfer: cannot allocate ", bytes_, " bytes of host memory");
    }
    std::memset(data_, 0, bytes_);
  }
  ~HostBuffer() {
#if VITDDP_WITH_CUDA
    if (pinned_) {
      cudaFreeHost(data_);
      return;
    }
#endif
    free_host(data_);
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  char* data() const { return static_cast<char*>(data_); }
  uint64_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  uint64_t bytes_;
  bool pinned_;
};

std::string address_key(int rank) { return "transfer.address." + std::to_string(rank); }

// Rank 0 publishes its address before it trains and rank 1 connects at once (add_peer warms
// the connection both ways); rank 0 adds rank 1 once trained.
void publish_address(FabricEngine& engine, FileStore& store, int rank) {
  store.set(address_key(rank), transfer::address_text(engine.address()));
}
int add_other(FabricEngine& engine, FileStore& store, int rank, std::chrono::milliseconds timeout) {
  return engine.add_peer(transfer::address_from_text(store.get(address_key(1 - rank), timeout)), timeout);
}

// Waits that span rank 0's training or all of its transfers, not one operation: if rank 0 dies
// the launcher stops rank 1 first.
std::chrono::milliseconds long_wait(std::chrono::milliseconds timeout) { return timeout * 100; }

struct Measured {
  std::vector<double> list_seconds, loop_seconds, copy_seconds;
  bool verified = false;
  std::string verify_problem;
};

// Rank 0: the run's state after training, as a list of writes into rank 1's replica.
nlohmann::json send_state(TrainingRun& run, int64_t steps, const TransferFlags& flags, FabricEngine& engine,
                          FileStore& store, std::chrono::milliseconds timeout) {
  const CheckpointState state = checkpoint_state_of(run, steps);
  std::vector<Piece> pieces;
  uint64_t total = 0, payload = 0;
  for (const auto& [name, t] : checkpoint_tensors(state)) {
    VITDDP_CHECK(t.is_contiguous(), "bench transfer: ", name, " is not contiguous");
    Piece p{name, t, total, t.nbytes()};
    total = (total + p.bytes + kAlign - 1) / kAlign * kAlign;
    payload += p.bytes;
    pieces.push_back(std::move(p));
  }
  const bool on_gpu = run.device.is_cuda();
  nlohmann::json manifest;
  manifest["bytes"] = total;
  store.set("transfer.manifest", manifest.dump());
  const RegionDescriptor replica = transfer::descriptor_from_json(nlohmann::json::parse(store.get("transfer.replica", timeout)));
  const int peer = add_other(engine, store, 0, timeout);

  // The plain loop's source: the state packed as the replica holds it (so any transfer leaves
  // the same bytes there). On a GPU it is also the staging buffer the copy engines fill.
  HostBuffer packed(total, on_gpu);
  const int packed_region = engine.register_region(packed.data(), packed.bytes(), false);
  auto pack = [&] {
#if VITDDP_WITH_CUDA
    if (on_gpu) {
      for (const Piece& p : pieces)
        CUDA_CHECK(cudaMemcpyAsync(packed.data() + p.offset, p.tensor.data_ptr(), p.bytes, cudaMemcpyDeviceToHost, 0));
      CUDA_CHECK(cudaStreamSynchronize(0));
      return;
    }
#endif
    for (const Piece& p : pieces) std::memcpy(packed.data() + p.offset, p.tensor.data_ptr(), p.bytes);
  };
  pack();

  // The list: a write per tensor, from where it lies (a region each on the CPU) or, on a GPU,
  // from its place in the staging buffer once the copy engine has put it there.
  std::vector<transfer::Write> writes;
  for (const Piece& p : pieces) {
    transfer::Write w;
    if (on_gpu) {
      w.src_region = packed_region;
      w.src_offset = p.offset;
    } else {
      w.src_region = engine.register_region(p.tensor.data_ptr(), p.bytes, false);
    }
    w.bytes = p.bytes;
    w.peer = peer;
    w.dst = replica;
    w.dst_offset = p.offset;
    writes.push_back(w);
  }
  auto send_list = [&] {
#if VITDDP_WITH_CUDA
    if (on_gpu) {
      // Staged in groups of about 64 MB: a group's writes go as soon as its copies are done,
      // while the copy engines fill the next.
      constexpr uint64_t kGroup = 64ull << 20;
      std::vector<uint64_t> tickets;
      size_t first = 0;
      while (first < pieces.size()) {
        size_t end = first;
        uint64_t bytes = 0;
        while (end < pieces.size() && (bytes < kGroup || end == first)) bytes += pieces[end++].bytes;
        for (size_t i = first; i < end; ++i)
          CUDA_CHECK(cudaMemcpyAsync(packed.data() + pieces[i].offset, pieces[i].tensor.data_ptr(), pieces[i].bytes,
                                     cudaMemcpyDeviceToHost, 0));
        CUDA_CHECK(cudaStreamSynchronize(0));
        tickets.push_back(engine.submit(std::vector<transfer::Write>(writes.begin() + static_cast<long>(first),
                                                                     writes.begin() + static_cast<long>(end))));
        first = end;
      }
      for (uint64_t t : tickets) engine.wait(t, timeout);
      return;
    }
#endif
    engine.wait(engine.submit(writes), timeout);
  };
  auto seconds_of = [](auto&& f) {
    const auto t0 = Clock::now();
    f();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };

  Measured m;
  send_list();  // untimed: the first pass over every page and connection
  engine.write_contiguous_loop(packed_region, peer, replica, total, timeout);
  for (int k = 0; k < flags.repeats; ++k) {
    m.list_seconds.push_back(seconds_of(send_list));
    m.loop_seconds.push_back(
        seconds_of([&] { engine.write_contiguous_loop(packed_region, peer, replica, total, timeout); }));
    if (on_gpu) m.copy_seconds.push_back(seconds_of(pack));
  }
  // Checked: the replica cleared, the list sent again, then every byte compared by CRC-32.
  store.set("transfer.clear", "1");
  (void)store.get("transfer.cleared", timeout);
  send_list();
  store.set("transfer.done", std::to_string(crc32(packed.data(), packed.bytes())));
  const std::string verdict = store.get("transfer.verified", timeout);
  m.verified = verdict == "ok";
  m.verify_problem = m.verified ? "" : verdict;

  nlohmann::json j;
  j["system"] = "vitddp";
  j["bench"] = "transfer";
  j["provider"] = engine.provider_name();
  j["model"] = run.model_config.name;
  j["device"] = run.device_name;
  j["optimizer"] = run.optimizer->name();
  j["hook"] = run.config.hook;
  j["tensors"] = pieces.size();
  j["regions"] = on_gpu ? 1 : pieces.size() + 1;
  j["bytes"] = payload;
  j["repeats"] = flags.repeats;
  j["list_seconds"] = m.list_seconds;
  j["loop_seconds"] = m.loop_seconds;
  j["list_gbps"] = payload / median(m.list_seconds) / 1e9;
  j["loop_gbps"] = total / median(m.loop_seconds) / 1e9;
  j["list_vs_loop"] = j["list_gbps"].get<double>() / j["loop_gbps"].get<double>();
  // The same ratio per repeat, list and loop back to back, then its median: the machine's drift
  // over a run moves both of a pair alike.
  std::vector<double> paired;
  for (size_t k = 0; k < m.list_seconds.size(); ++k)
    paired.push_back((payload / m.list_seconds[k]) / (total / m.loop_seconds[k]));
  j["list_vs_loop_paired"] = median(paired);
  if (on_gpu) {
    j["copy_seconds"] = m.copy_seconds;
    j["copy_engine_gbps"] = payload / median(m.copy_seconds) / 1e9;
  }
  j["verified"] = m.verified;
  if (!m.verified) j["verify_problem"] = m.verify_problem;
  return j;
}

// Rank 1: the replica, written by rank 0, checked at the end.
void hold_replica(const TransferFlags& flags, FabricEngine& engine, FileStore& store,
                  std::chrono::milliseconds timeout) {
  (void)flags;
  publish_address(engine, store, 1);
  (void)add_other(engine, store, 1, timeout);
  const nlohmann::json manifest = nlohmann::json::parse(store.get("transfer.manifest", long_wait(timeout)));
  HostBuffer replica(manifest.at("bytes").get<uint64_t>(), false);
  const int region = engine.register_region(replica.data(), replica.bytes(), true);
  store.set("transfer.replica", transfer::descriptor_json(engine.descriptor(region)).dump());
  (void)store.get("transfer.clear", long_wait(timeout));
  std::memset(replica.data(), 0, replica.bytes());
  store.set("transfer.cleared", "1");
  const std::string expected = store.get("transfer.done", timeout);
  const std::string got = std::to_string(crc32(replica.data(), replica.bytes()));
  store.set("transfer.verified", got == expected ? "ok" : "CRC-32 " + got + " where the sender's is " + expected);
}

#endif  // VITDDP_WITH_LIBFABRIC

}  // namespace

int run_bench_transfer(int argc, char** argv) {
  TransferFlags flags;
  std::vector<char*> rest = split_flags(argc, argv, &flags);
  TrainConfig config;
  if (!parse_train_config(static_cast<int>(rest.size()), rest.data(), &config)) return kExitOk;
#if !VITDDP_WITH_LIBFABRIC
  (void)config;
  throw Error("train bench transfer: this build has no transfer engine (libfabric-dev was not found)");
#else
  VITDDP_CHECK(config.checkpoint_dir.empty() && !config.resume && config.save.empty() && config.trace.empty(),
               "train bench transfer trains its state for itself: --checkpoint-dir, --resume, --save and --trace do "
               "not apply");
  const RankEnvironment env = read_rank_environment();
  // Two ranks: two processes on this host, or one on each of two.
  const int per_node = std::max(config.gpus, config.procs) > 0 ? std::max(config.gpus, config.procs)
                                                                : (config.nnodes > 1 ? 1 : 2);
  VITDDP_CHECK(per_node * config.nnodes == 2, "train bench transfer runs on two ranks (one sends, one holds the "
               "replica); got ", per_node, " per node on ", config.nnodes, " node(s)");
  Placement placement;
  placement.processes = per_node;
  placement.flag = config.gpus > 0 ? "--gpus" : "--procs";
  placement.nnodes = config.nnodes;
  placement.node_rank = config.node_rank;
  placement.rendezvous = config.rendezvous;
  if (std::optional<int> code = launch_if_needed(placement, argc, argv, env, std::cerr)) return *code;
  VITDDP_CHECK(env.world_size == 2, "train bench transfer runs on two ranks, not ", env.world_size);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(config.timeout * 1000));
  FileStore store(env.rendezvous);
  transfer::FabricOptions options;
  options.provider = flags.provider;
  if (flags.provider == "tcp") {
    const char* host = std::getenv("VITDDP_GLOO_HOST");
    options.node = host && *host ? host : "127.0.0.1";
  }
  FabricEngine engine(options);
  if (env.rank == 0) publish_address(engine, store, 0);
  if (env.rank == 1) {
    hold_replica(flags, engine, store, timeout);
    return kExitOk;
  }
  // The run the flags describe, alone in this process, for a step past PowerSGD's start (so
  // its state exists); with the state as training leaves it, sent.
  TrainConfig one = config;
  one.procs = one.gpus = 0;
  one.nnodes = 1;
  one.node_rank = -1;
  one.rendezvous.clear();
  one.json = false;
  one.print_every = 0;
  if (one.hook != "allreduce") {
    one.ddp = true;
    if (one.hook == "powersgd") one.powersgd_start_iter = std::min<int64_t>(one.powersgd_start_iter, 1);
  }
  one.steps = one.hook == "powersgd" ? one.powersgd_start_iter + 1 : 1;
  one.untimed_steps = 0;
  std::ostream quiet(nullptr);
  nlohmann::json result;
  run_training(one, RankEnvironment{}, quiet,
               [&](TrainingRun& run) { result = send_state(run, one.steps, flags, engine, store, timeout); });
  if (config.json) {
    std::cout << result.dump() << std::endl;
  } else {
    std::ostringstream s;
    s << std::fixed << std::setprecision(2) << "transfer " << result["model"].get<std::string>() << " state ("
      << result["optimizer"].get<std::string>() << ", hook " << result["hook"].get<std::string>() << "): "
      << result["tensors"].get<size_t>() << " tensors, " << result["bytes"].get<uint64_t>() / 1e9 << " GB on "
      << result["device"].get<std::string>() << ", " << result["provider"].get<std::string>() << ": list of writes "
      << result["list_gbps"].get<double>() << " GB/s, contiguous fi_write loop " << result["loop_gbps"].get<double>()
      << " GB/s (" << std::setprecision(1) << 100 * result["list_vs_loop"].get<double>() << "%)";
    if (result.contains("copy_engine_gbps"))
      s << std::setprecision(2) << "; copy engine alone " << result["copy_engine_gbps"].get<double>() << " GB/s";
    s << (result["verified"].get<bool>() ? "; every byte arrived" : "; BYTES DIFFER");
    std::cout << s.str() << std::endl;
  }
  VITDDP_CHECK(result["verified"].get<bool>(), "bench transfer: the replica differs from the state sent: ",
               result.value("verify_problem", std::string()));
  return kExitOk;
#endif
}

}  // namespace vitddp::bench
