// `train topology`. See train/bench/topology.h.
#include "train/bench/topology.h"

#include <CLI/CLI.hpp>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <regex>
#include <set>
#include <sstream>

#include "framework/core/error.h"
#include "train/exit_codes.h"
#if VITDDP_WITH_CUDA
#include <cuda_runtime.h>

#include "framework/core/tensor.h"
#include "framework/cuda/check.h"
#include "framework/cuda/device.h"
#include "framework/cuda/stream.h"
#endif
#if VITDDP_WITH_NCCL
#include "distributed/nccl/nccl_check.h"
#endif

namespace vitddp {

// ---- NCCL's log ----

NcclLogSummary parse_nccl_log(const std::string& text) {
  // p2p.cc / shm.cc / net.cc:
  //   "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/%s%s%s"       (rank[device])
  //   "Channel %02d : %d[%d] -> %d[%d] via SHM/%s/%s"
  //   "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s"
  // Older versions print the bus id (hex) in the brackets; only the ranks matter here.
  static const std::regex connection(
      R"(Channel\s+(\d+)(?:/\d+)?\s*:\s*(\d+)\[[0-9a-fA-Fx]*\]\s*->\s*(\d+)\[[0-9a-fA-Fx]*\]\s*(?:\[(?:send|receive)\]\s*)?via\s+(\S.*?)\s*$)");
  NcclLogSummary summary;
  std::istringstream in(text);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (line.find("NVLS multicast support is available") != std::string::npos) summary.nvls_available = true;
    if (line.find("Channel") == std::string::npos || !std::regex_search(line, m, connection)) continue;
    NcclConnection c;
    c.channel = std::stoi(m[1]);
    c.from_rank = std::stoi(m[2]);
    c.to_rank = std::stoi(m[3]);
    c.transport = m[4];
    summary.connections.push_back(c);
  }
  return summary;
}

std::string transport_kind(const std::string& transport) { return transport.substr(0, transport.find('/')); }

std::vector<std::string> pair_transports(const NcclLogSummary& log, int a, int b) {
  std::set<std::string> seen;
  for (const NcclConnection& c : log.connections)
    if ((c.from_rank == a && c.to_rank == b) || (c.from_rank == b && c.to_rank == a)) seen.insert(c.transport);
  return {seen.begin(), seen.end()};
}

// ---- the report ----

std::string pcie_path_name(int level) {
  switch (level) {
    case 0: return "same board";
    case 10: return "PIX: one PCIe switch";
    case 20: return "PXB: several PCIe switches";
    case 30: return "PHB: a PCIe host bridge";
    case 40: return "NODE: host bridges of one NUMA node";
    case 50: return "SYS: across NUMA nodes";
  }
  return "unknown (NVML level " + std::to_string(level) + ")";
}

int nvlink_generation(int major) {
  switch (major) {
    case 6: return 1;   // Pascal
    case 7: return 2;   // Volta, Turing
    case 8: return 3;   // Ampere
    case 9: return 4;   // Hopper
    case 10: return 5;  // Blackwell
  }
  return 0;
}

std::string GpuPair::link() const {
  if (!nvml) return "unknown (no NVML)";
  if (nvlinks == 0) return "PCIe";
  return "NVLink" + (nvlink_gen > 0 ? std::to_string(nvlink_gen) : std::string()) + " x" + std::to_string(nvlinks) +
         (nvswitch ? " (NVSwitch)" : "");
}

namespace {

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string p2p_text(const GpuPair& p) {
  if (p.p2p_ab && p.p2p_ba) return "yes";
  if (!p.p2p_ab && !p.p2p_ba) return "no";
  return p.p2p_ab ? detail::concat(p.a, "->", p.b, " only") : detail::concat(p.b, "->", p.a, " only");
}

}  // namespace

std::string topology_table(const std::vector<GpuPair>& pairs) {
  std::string out = "| GPUs | link (NVML) | PCIe path (NVML) | P2P (CUDA) | NCCL transport |\n|---|---|---|---|---|\n";
  for (const GpuPair& p : pairs)
    out += detail::concat("| ", p.a, " <-> ", p.b, " | ", p.link(), " | ", p.pcie_path.empty() ? "unknown" : p.pcie_path,
                          " | ", p2p_text(p), " | ", p.nccl.empty() ? "none seen" : join(p.nccl, ", "), " |\n");
  return out;
}

std::vector<std::string> topology_hints(const std::vector<GpuPair>& pairs, const std::map<std::string, std::string>& nccl_env) {
  auto env = [&](const std::string& name) {
    auto it = nccl_env.find(name);
    return it == nccl_env.end() ? std::string() : it->second;
  };
  // Pairs with NVLink whose NCCL connections avoid it, grouped by what NCCL used instead.
  std::map<std::string, std::vector<const GpuPair*>> slow;
  std::vector<const GpuPair*> no_peer_access;
  for (const GpuPair& p : pairs) {
    if (p.nvlinks == 0) continue;
    std::set<std::string> kinds;
    for (const std::string& t : p.nccl) kinds.insert(transport_kind(t));
    if (kinds.count("NET")) {
      slow["NET"].push_back(&p);
    } else if (kinds.count("SHM")) {
      slow["SHM"].push_back(&p);
    } else if (!(p.p2p_ab && p.p2p_ba)) {
      no_peer_access.push_back(&p);
    }
  }
  auto pair_list = [](const std::vector<const GpuPair*>& ps) {
    std::vector<std::string> names;
    for (size_t i = 0; i < ps.size() && i < 8; ++i) names.push_back(detail::concat(ps[i]->a, "-", ps[i]->b));
    if (ps.size() > 8) names.push_back(detail::concat("and ", ps.size() - 8, " more"));
    return join(names, ", ");
  };
  std::vector<std::string> hints;
  for (const auto& [kind, ps] : slow) {
    const GpuPair& first = *ps.front();
    std::string hint = detail::concat(
        "hint: GPU pair", ps.size() > 1 ? "s " : " ", pair_list(ps), ps.size() > 1 ? " have " : " has ", first.link(),
        " but NCCL moves their data through ",
        kind == "SHM" ? "host shared memory (SHM): every chunk is copied GPU -> host RAM -> GPU, crossing PCIe twice and "
                        "the CPU's memory"
                      : "the network stack (NET): every chunk goes through host memory and sockets",
        ", so all-reduce runs at tens of GB/s instead of NVLink's hundreds");
    if (env("NCCL_P2P_DISABLE") == "1") hint += "; NCCL_P2P_DISABLE=1 is set: unset it to use NVLink";
    if (!env("NCCL_P2P_LEVEL").empty())
      hint += "; NCCL_P2P_LEVEL=" + env("NCCL_P2P_LEVEL") + " limits peer-to-peer to nearer GPUs";
    if (kind == "NET" && env("NCCL_SHM_DISABLE") == "1") hint += "; NCCL_SHM_DISABLE=1 is set as well";
    if (!(first.p2p_ab && first.p2p_ba))
      hint += "; CUDA reports no peer access between them (driver, IOMMU or container settings)";
    hints.push_back(hint);
  }
  if (!no_peer_access.empty())
    hints.push_back("hint: GPU pair" + std::string(no_peer_access.size() > 1 ? "s " : " ") + pair_list(no_peer_access) +
                    " have NVLink but CUDA reports no peer access between them (driver, IOMMU or container settings): "
                    "NCCL cannot use the NVLinks directly");
  return hints;
}

// ---- the command ----

namespace {

#if VITDDP_WITH_CUDA

// The few NVML declarations `train topology` uses (nvml.h is not part of every toolkit), loaded
// from the driver's libnvidia-ml.so.1 at run time.
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct NvmlPciInfo {  // nvmlPciInfo_t
  char bus_id_legacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_subsystem_id;
  char bus_id[32];
};
constexpr int kNvmlSuccess = 0;
constexpr unsigned int kNvmlMaxLinks = 18;    // NVML_NVLINK_MAX_LINKS
constexpr int kNvmlNvLinkDeviceSwitch = 2;   // NVML_NVLINK_DEVICE_TYPE_SWITCH
constexpr int kNvmlP2pCapsNvLink = 2;        // NVML_P2P_CAPS_INDEX_NVLINK
constexpr int kNvmlP2pStatusOk = 0;          // NVML_P2P_STATUS_OK

class Nvml {
 public:
  // nullptr (and the reason in `why`) when the library or a function is missing, or init fails.
  static std::unique_ptr<Nvml> load(std::string* why) {
    std::unique_ptr<Nvml> nvml(new Nvml());
    nvml->lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!nvml->lib_) {
      const char* error = dlerror();
      *why = error ? error : "dlopen(\"libnvidia-ml.so.1\") failed";
      return nullptr;
    }
    bool ok = nvml->bind(nvml->init_, "nvmlInit_v2") && nvml->bind(nvml->shutdown_, "nvmlShutdown") &&
              nvml->bind(nvml->error_string_, "nvmlErrorString") &&
              nvml->bind(nvml->driver_version_, "nvmlSystemGetDriverVersion") &&
              nvml->bind(nvml->handle_by_bus_id_, "nvmlDeviceGetHandleByPciBusId_v2") &&
              nvml->bind(nvml->common_ancestor_, "nvmlDeviceGetTopologyCommonAncestor") &&
              nvml->bind(nvml->nvlink_state_, "nvmlDeviceGetNvLinkState") &&
              nvml->bind(nvml->nvlink_remote_pci_, "nvmlDeviceGetNvLinkRemotePciInfo_v2") &&
              nvml->bind(nvml->p2p_status_, "nvmlDeviceGetP2PStatus");
    if (!ok) {
      *why = "libnvidia-ml.so.1 lacks " + nvml->missing_;
      return nullptr;
    }
    nvml->bind(nvml->nvlink_remote_type_, "nvmlDeviceGetNvLinkRemoteDeviceType");  // optional (drivers >= 450)
    const int r = nvml->init_();
    if (r != kNvmlSuccess) {
      *why = std::string("nvmlInit failed: ") + nvml->error_string_(r);
      return nullptr;
    }
    nvml->initialised_ = true;
    return nvml;
  }
  ~Nvml() {
    if (initialised_) shutdown_();
    if (lib_) dlclose(lib_);
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  std::string driver_version() const {
    char buf[96] = {};
    return driver_version_(buf, sizeof(buf)) == kNvmlSuccess ? buf : "unknown";
  }
  nvmlDevice_t device(const std::string& bus_id) const {
    nvmlDevice_t d = nullptr;
    return handle_by_bus_id_(bus_id.c_str(), &d) == kNvmlSuccess ? d : nullptr;
  }
  // nvmlGpuTopologyLevel_t, or -1.
  int common_ancestor(nvmlDevice_t a, nvmlDevice_t b) const {
    int level = -1;
    return common_ancestor_(a, b, &level) == kNvmlSuccess ? level : -1;
  }
  bool nvlink_p2p(nvmlDevice_t a, nvmlDevice_t b) const {
    int status = -1;
    return p2p_status_(a, b, kNvmlP2pCapsNvLink, &status) == kNvmlSuccess && status == kNvmlP2pStatusOk;
  }

  struct Link {
    unsigned int domain, bus, device;  // the remote end's PCI address
    bool to_switch;
  };
  std::vector<Link> active_links(nvmlDevice_t d) const {
    std::vector<Link> links;
    for (unsigned int l = 0; l < kNvmlMaxLinks; ++l) {
      int active = 0;
      if (nvlink_state_(d, l, &active) != kNvmlSuccess || !active) continue;
      NvmlPciInfo pci{};
      if (nvlink_remote_pci_(d, l, &pci) != kNvmlSuccess) continue;
      int type = -1;
      const bool typed = nvlink_remote_type_ && nvlink_remote_type_(d, l, &type) == kNvmlSuccess;
      links.push_back({pci.domain, pci.bus, pci.device, typed && type == kNvmlNvLinkDeviceSwitch});
    }
    return links;
  }

 private:
  Nvml() = default;
  template <typename Fn>
  bool bind(Fn& fn, const char* name) {
    fn = reinterpret_cast<Fn>(dlsym(lib_, name));
    if (!fn && missing_.empty()) missing_ = name;
    return fn != nullptr;
  }

  void* lib_ = nullptr;
  bool initialised_ = false;
  std::string missing_;
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  const char* (*error_string_)(int) = nullptr;
  int (*driver_version_)(char*, unsigned int) = nullptr;
  int (*handle_by_bus_id_)(const char*, nvmlDevice_t*) = nullptr;
  int (*common_ancestor_)(nvmlDevice_t, nvmlDevice_t, int*) = nullptr;
  int (*nvlink_state_)(nvmlDevice_t, unsigned int, int*) = nullptr;
  int (*nvlink_remote_pci_)(nvmlDevice_t, unsigned int, NvmlPciInfo*) = nullptr;
  int (*nvlink_remote_type_)(nvmlDevice_t, unsigned int, int*) = nullptr;
  int (*p2p_status_)(nvmlDevice_t, nvmlDevice_t, int, int*) = nullptr;
};

struct GpuInfo {
  std::string description;  // "0: NVIDIA H200 (139 GiB)"
  std::string bus_id;       // "0000:18:00.0"
  unsigned int domain = 0, bus = 0, device = 0;
  int major = 0;            // compute capability
};

std::vector<GpuInfo> visible_gpus() {
  std::vector<GpuInfo> gpus;
  const std::vector<std::string> names = cuda::describe_devices();
  for (int i = 0; i < static_cast<int>(names.size()); ++i) {
    GpuInfo g;
    g.description = names[i];
    char bus_id[32] = {};
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), i));
    g.bus_id = bus_id;
    unsigned int function = 0;
    std::sscanf(bus_id, "%x:%x:%x.%x", &g.domain, &g.bus, &g.device, &function);
    CUDA_CHECK(cudaDeviceGetAttribute(&g.major, cudaDevAttrComputeCapabilityMajor, i));
    gpus.push_back(g);
  }
  return gpus;
}

// NVLink count and PCIe path of every pair, from NVML.
void fill_nvml(const Nvml& nvml, const std::vector<GpuInfo>& gpus, std::vector<GpuPair>& pairs) {
  std::vector<nvmlDevice_t> handles;
  std::vector<std::vector<Nvml::Link>> links;
  for (const GpuInfo& g : gpus) {
    handles.push_back(nvml.device(g.bus_id));
    links.push_back(handles.back() ? nvml.active_links(handles.back()) : std::vector<Nvml::Link>{});
  }
  auto is_gpu = [&](const Nvml::Link& l, const GpuInfo& g) {
    return l.domain == g.domain && l.bus == g.bus && l.device == g.device;
  };
  for (GpuPair& p : pairs) {
    nvmlDevice_t a = handles[p.a], b = handles[p.b];
    if (!a || !b) continue;
    p.nvml = true;
    p.nvlink_gen = nvlink_generation(gpus[p.a].major);
    const int level = nvml.common_ancestor(a, b);
    if (level >= 0) p.pcie_path = pcie_path_name(level);
    int direct = 0, to_switch = 0, to_other = 0;
    for (const Nvml::Link& l : links[p.a]) {
      if (is_gpu(l, gpus[p.b])) {
        ++direct;
      } else if (l.to_switch) {
        ++to_switch;
      } else {
        bool other_gpu = false;
        for (const GpuInfo& g : gpus) other_gpu = other_gpu || is_gpu(l, g);
        if (!other_gpu) ++to_other;  // a switch when the driver cannot say, or a GPU we do not see
      }
    }
    if (direct > 0) {
      p.nvlinks = direct;
    } else if (to_switch + to_other > 0 && !links[p.b].empty() && nvml.nvlink_p2p(a, b)) {
      p.nvlinks = to_switch + to_other;
      p.nvswitch = true;
    }
  }
}

#if VITDDP_WITH_NCCL

// Note [Reading NCCL's transport choice]
// NCCL logs each connection it makes ("Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"), and
// makes them lazily, on the first operation that needs them. One small all-reduce connects the
// neighbours of its algorithm (a ring touches only n of the n(n-1)/2 pairs); a send and a
// receive between every pair then connects the rest. The log goes to a temporary file through
// NCCL_DEBUG_FILE, set with NCCL_DEBUG=INFO before the first NCCL call of this process (NCCL
// reads them once). Other NCCL settings (NCCL_P2P_DISABLE, NCCL_NVLS_ENABLE, ...) stay as the
// environment has them: what NCCL chooses under them is the point.
NcclLogSummary probe_nccl(int n, std::string* version) {
  char path[] = "/tmp/vitddp_nccl_log_XXXXXX";
  const int fd = mkstemp(path);
  VITDDP_CHECK(fd >= 0, "train topology: cannot create a temporary file for NCCL's log in /tmp");
  ::close(fd);
  struct RemoveFile {
    std::string path;
    ~RemoveFile() { std::remove(path.c_str()); }
  } remove_log{path};
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "INIT,P2P,SHM,NET", 1);
  setenv("NCCL_DEBUG_FILE", path, 1);

  int code = 0;
  NCCL_CHECK(ncclGetVersion(&code));
  *version = detail::concat(code / 10000, ".", code / 100 % 100, ".", code % 100);

  std::vector<int> devices(n);
  for (int i = 0; i < n; ++i) devices[i] = i;
  struct Comms {
    std::vector<ncclComm_t> comms;
    ~Comms() {
      for (ncclComm_t c : comms)
        if (c) NCCL_WARN(ncclCommDestroy(c));
    }
  } comms{std::vector<ncclComm_t>(n, nullptr)};
  NCCL_CHECK(ncclCommInitAll(comms.comms.data(), n, devices.data()));

  constexpr int64_t kCount = 1024;
  std::vector<Tensor> sums, sends, recvs;
  for (int i = 0; i < n; ++i) {
    cuda::set_device(i);
    sums.push_back(Tensor::full({kCount}, 1.0, DType::kF32, Device::cuda(i)));      // (kCount,)
    sends.push_back(Tensor::full({kCount}, 1.0, DType::kF32, Device::cuda(i)));     // (kCount,)
    recvs.push_back(Tensor::zeros({n, kCount}, DType::kF32, Device::cuda(i)));      // (n, kCount)
  }
  NCCL_CHECK(ncclGroupStart());
  for (int i = 0; i < n; ++i) {
    cuda::set_device(i);
    void* data = sums[i].data_ptr();
    NCCL_CHECK(ncclAllReduce(data, data, kCount, ncclFloat, ncclSum, comms.comms[i], cuda::current_stream()));
  }
  NCCL_CHECK(ncclGroupEnd());
  NCCL_CHECK(ncclGroupStart());
  for (int i = 0; i < n; ++i) {
    cuda::set_device(i);
    for (int j = 0; j < n; ++j) {
      if (j == i) continue;
      float* slot = static_cast<float*>(recvs[i].data_ptr()) + j * kCount;
      NCCL_CHECK(ncclSend(sends[i].data_ptr(), kCount, ncclFloat, j, comms.comms[i], cuda::current_stream()));
      NCCL_CHECK(ncclRecv(slot, kCount, ncclFloat, j, comms.comms[i], cuda::current_stream()));
    }
  }
  NCCL_CHECK(ncclGroupEnd());
  for (int i = 0; i < n; ++i) {
    cuda::set_device(i);
    CUDA_CHECK(cudaStreamSynchronize(cuda::current_stream()));
  }
  std::ifstream in(path);
  return parse_nccl_log(std::string(std::istreambuf_iterator<char>(in), {}));
}

#endif  // VITDDP_WITH_NCCL
#endif  // VITDDP_WITH_CUDA

}  // namespace

int run_topology(int argc, char** argv) {
  CLI::App app{"train topology: every GPU pair's link (NVML), peer access (CUDA) and the transport NCCL chooses",
               "train topology"};
  app.set_config();
  try {
    app.parse(argc - 1, argv + 1);  // argv[1] ("topology") stands where CLI11 expects the program name
  } catch (const CLI::CallForHelp& e) {
    app.exit(e);
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    throw Error(e.what());
  }
#if !VITDDP_WITH_CUDA
  throw Error("train topology reports links between GPUs, and this build has no CUDA backend (built with "
              "-DVITDDP_CUDA=OFF or without the CUDA toolkit)");
#else
  const std::vector<GpuInfo> gpus = visible_gpus();
  const char* visible_env = std::getenv("CUDA_VISIBLE_DEVICES");
  VITDDP_CHECK(!gpus.empty(), "no GPU visible",
               visible_env ? std::string(" (CUDA_VISIBLE_DEVICES='") + visible_env + "')" : std::string(),
               ": train topology reports links between GPUs");
  std::cout << "GPUs (CUDA order):\n";
  for (const GpuInfo& g : gpus) std::cout << "  " << g.description << ", PCI " << g.bus_id << "\n";
  const int n = static_cast<int>(gpus.size());
  if (n == 1) {
    std::cout << "one GPU visible: no pairs to report\n";
    return kExitOk;
  }
  std::vector<GpuPair> pairs;
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) {
      GpuPair p;
      p.a = a;
      p.b = b;
      int can = 0;
      CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
      p.p2p_ab = can != 0;
      CUDA_CHECK(cudaDeviceCanAccessPeer(&can, b, a));
      p.p2p_ba = can != 0;
      pairs.push_back(p);
    }

  std::string why;
  if (std::unique_ptr<Nvml> nvml = Nvml::load(&why)) {
    std::cout << "NVML: driver " << nvml->driver_version() << "\n";
    fill_nvml(*nvml, gpus, pairs);
  } else {
    std::cout << "NVML: not available (" << why << "): links and PCIe paths are unknown\n";
  }

#if VITDDP_WITH_NCCL
  std::string version;
  const NcclLogSummary log = probe_nccl(n, &version);
  for (GpuPair& p : pairs) p.nccl = pair_transports(log, p.a, p.b);
  std::cout << "NCCL " << version << ": transports from its log of one all-reduce and a send/receive between every "
            << "pair (one process, ncclCommInitAll over the " << n << " GPUs)\n";
  if (log.nvls_available)
    std::cout << "NCCL reports NVLS (NVSwitch multicast) available: all-reduce may use it instead of these connections\n";
#else
  std::cout << "NCCL: this build has none, so the transport column is empty\n";
#endif
  std::cout << "\n" << topology_table(pairs);

  std::map<std::string, std::string> nccl_env;
  for (const char* name : {"NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE", "NCCL_NVLS_ENABLE"})
    if (const char* value = std::getenv(name)) nccl_env[name] = value;
  const std::vector<std::string> hints = topology_hints(pairs, nccl_env);
  if (!hints.empty()) std::cout << "\n";
  for (const std::string& h : hints) std::cout << h << "\n";
  return kExitOk;
#endif
}

}  // namespace vitddp
