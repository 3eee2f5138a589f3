// `train topology`: for every pair of visible GPUs, the link NVML reports (NVLink with its link
// count and generation, or the PCIe path), whether CUDA allows peer access, and the transport
// NCCL actually chose, read from NCCL's own INFO log of a one-process communicator over all
// visible GPUs. When NCCL goes through host shared memory or a network although NVLink is there
// (NCCL_P2P_DISABLE=1, say) it prints a hint saying so and why that is slow.
//
// NVML is loaded at run time (dlopen of libnvidia-ml.so.1, which the driver installs), so the
// program has no link dependency on it; without it the NVML columns say "unknown". The parts
// that need no GPU (the NCCL log parser, the PCIe path names, the table and the hints) are pure
// functions, tested in tests/train/bench/topology_test.cpp.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace vitddp {

// ---- NCCL's log ----

// One connection, as a line "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read" reports it.
struct NcclConnection {
  int channel = 0;
  int from_rank = 0;
  int to_rank = 0;
  std::string transport;  // what follows "via": "P2P/CUMEM/read", "SHM/direct/direct", "NET/Socket/0"
};

struct NcclLogSummary {
  std::vector<NcclConnection> connections;  // in log order
  bool nvls_available = false;              // "NVLS multicast support is available"
};

// Reads NCCL INFO lines (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS including INIT); other lines are ignored.
NcclLogSummary parse_nccl_log(const std::string& text);
// "P2P", "SHM", "NET", ... : the transport's first component.
std::string transport_kind(const std::string& transport);
// The distinct transports between ranks a and b, both directions, sorted.
std::vector<std::string> pair_transports(const NcclLogSummary& log, int a, int b);

// ---- the report ----

// nvidia-smi topo's names for NVML's nvmlGpuTopologyLevel_t (0, 10, 20, 30, 40, 50):
// "PIX: one PCIe switch" ... "SYS: across NUMA nodes (CPU interconnect)".
std::string pcie_path_name(int nvml_topology_level);
// NVLink generation of a GPU architecture (compute capability major): 6 -> 1 ... 9 -> 4, 10 -> 5; 0 unknown.
int nvlink_generation(int compute_capability_major);

struct GpuPair {
  int a = 0;
  int b = 0;
  bool nvml = false;     // NVML answered for this pair
  int nvlinks = 0;       // active NVLinks between them (direct, or a's links to NVSwitches)
  bool nvswitch = false; // the NVLinks go through NVSwitches
  int nvlink_gen = 0;    // 0 unknown
  std::string pcie_path; // pcie_path_name(), empty when unknown
  bool p2p_ab = false;   // cudaDeviceCanAccessPeer(a, b)
  bool p2p_ba = false;
  std::vector<std::string> nccl;  // pair_transports()

  // "NVLink4 x18 (NVSwitch)", "PCIe", "unknown (no NVML)"
  std::string link() const;
};

// The markdown table: pair, link, PCIe path, P2P, NCCL transport.
std::string topology_table(const std::vector<GpuPair>& pairs);
// One line per problem: NVLink present but NCCL on SHM or NET (naming the NCCL_* settings in
// `nccl_env` that cause it), or no CUDA peer access over NVLink.
std::vector<std::string> topology_hints(const std::vector<GpuPair>& pairs, const std::map<std::string, std::string>& nccl_env);

// `train topology` (argv[1] == "topology"). Returns the exit code; throws vitddp::Error (bad
// input, exit 2) when no GPU is visible or the build has no CUDA.
int run_topology(int argc, char** argv);

}  // namespace vitddp
