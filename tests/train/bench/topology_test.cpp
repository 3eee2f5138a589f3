// `train topology`'s pure parts: the NCCL INFO log parser on sample log text (current and older
// formats), PCIe path names, NVLink generations, the table and the hints; and the command
// without a GPU (one line, exit 2).
#include <gtest/gtest.h>

#include <algorithm>

#include "common/train_process.h"
#include "train/bench/topology.h"

namespace vitddp {
namespace {

// Lines as NCCL 2.2x writes them with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P,SHM,NET, plus
// an older bus-id form and lines that must be ignored.
const char* kLog = R"(h200:2811:2811 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.2<0>
h200:2811:2811 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
h200:2811:2830 [0] NCCL INFO NVLS multicast support is not available on dev 0 (NVLS_NCHANNELS 0)
h200:2811:2830 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
h200:2811:2831 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read
h200:2811:2830 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read
h200:2811:2830 [0] NCCL INFO Channel 02/1 : 0[0] -> 2[2] via P2P/direct pointer/read
h200:2811:2832 [2] NCCL INFO Channel 00 : 2[2] -> 3[3] via SHM/direct/direct
h200:2811:2833 [3] NCCL INFO Channel 00/0 : 3[3] -> 0[0] [send] via NET/Socket/0
h200:2811:2830 [0] NCCL INFO Channel 00/0 : 3[3] -> 0[0] [receive] via NET/IB/0/GDRDMA
h200:2811:2830 [0] NCCL INFO Channel 00/0 : 0[0] via NET/IBV/0/GDRDMA(PCI)
h200:2811:2830 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1
old:77:77 [1] NCCL INFO Channel 03 : 1[b4000] -> 2[b5000] via P2P/IPC
)";

TEST(Topology, ParsesNcclConnections) {
  NcclLogSummary log = parse_nccl_log(kLog);
  ASSERT_EQ(log.connections.size(), 8u);
  EXPECT_FALSE(log.nvls_available);
  const NcclConnection& first = log.connections[0];
  EXPECT_EQ(first.channel, 0);
  EXPECT_EQ(first.from_rank, 0);
  EXPECT_EQ(first.to_rank, 1);
  EXPECT_EQ(first.transport, "P2P/CUMEM/read");
  EXPECT_EQ(log.connections[2].channel, 1);
  EXPECT_EQ(log.connections[3].transport, "P2P/direct pointer/read");
  EXPECT_EQ(log.connections[4].transport, "SHM/direct/direct");
  EXPECT_EQ(log.connections[5].transport, "NET/Socket/0");
  EXPECT_EQ(log.connections[6].transport, "NET/IB/0/GDRDMA");
  EXPECT_EQ(log.connections[7].from_rank, 1);
  EXPECT_EQ(log.connections[7].to_rank, 2);
  EXPECT_EQ(log.connections[7].transport, "P2P/IPC");

  EXPECT_EQ(pair_transports(log, 0, 1), (std::vector<std::string>{"P2P/CUMEM/read"}));
  EXPECT_EQ(pair_transports(log, 1, 0), (std::vector<std::string>{"P2P/CUMEM/read"}));
  EXPECT_EQ(pair_transports(log, 0, 3), (std::vector<std::string>{"NET/IB/0/GDRDMA", "NET/Socket/0"}));
  EXPECT_EQ(pair_transports(log, 2, 3), (std::vector<std::string>{"SHM/direct/direct"}));
  EXPECT_TRUE(pair_transports(log, 1, 3).empty());

  EXPECT_EQ(transport_kind("P2P/CUMEM/read"), "P2P");
  EXPECT_EQ(transport_kind("SHM/direct/direct"), "SHM");
  EXPECT_EQ(transport_kind("NET/Socket/0"), "NET");

  EXPECT_TRUE(parse_nccl_log("x [0] NCCL INFO NVLS multicast support is available on dev 0 (NVLS_NCHANNELS 16)\n")
                  .nvls_available);
  EXPECT_TRUE(parse_nccl_log("").connections.empty());
}

TEST(Topology, NamesPathsAndGenerations) {
  EXPECT_EQ(pcie_path_name(10), "PIX: one PCIe switch");
  EXPECT_EQ(pcie_path_name(30), "PHB: a PCIe host bridge");
  EXPECT_EQ(pcie_path_name(50), "SYS: across NUMA nodes");
  EXPECT_EQ(pcie_path_name(7), "unknown (NVML level 7)");
  EXPECT_EQ(nvlink_generation(9), 4);   // H100, H200
  EXPECT_EQ(nvlink_generation(8), 3);   // A100
  EXPECT_EQ(nvlink_generation(10), 5);  // B200
  EXPECT_EQ(nvlink_generation(5), 0);
}

GpuPair nvlink_pair(std::vector<std::string> nccl) {
  GpuPair p;
  p.a = 0;
  p.b = 1;
  p.nvml = true;
  p.nvlinks = 18;
  p.nvswitch = true;
  p.nvlink_gen = 4;
  p.pcie_path = pcie_path_name(50);
  p.p2p_ab = p.p2p_ba = true;
  p.nccl = std::move(nccl);
  return p;
}

TEST(Topology, TableRows) {
  GpuPair pcie;
  pcie.a = 2;
  pcie.b = 3;
  pcie.nvml = true;
  pcie.pcie_path = pcie_path_name(20);
  pcie.p2p_ab = true;
  GpuPair unknown;
  unknown.a = 0;
  unknown.b = 2;
  const std::string table = topology_table({nvlink_pair({"P2P/CUMEM/read"}), pcie, unknown});
  EXPECT_NE(table.find("| 0 <-> 1 | NVLink4 x18 (NVSwitch) | SYS: across NUMA nodes | yes | P2P/CUMEM/read |"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| 2 <-> 3 | PCIe | PXB: several PCIe switches | 2->3 only | none seen |"), std::string::npos)
      << table;
  EXPECT_NE(table.find("| 0 <-> 2 | unknown (no NVML) | unknown | no | none seen |"), std::string::npos) << table;
}

TEST(Topology, HintsWhenNvlinkIsBypassed) {
  // NVLink used: nothing to say.
  EXPECT_TRUE(topology_hints({nvlink_pair({"P2P/CUMEM/read"})}, {}).empty());
  // Host shared memory although NVLink is there, because of NCCL_P2P_DISABLE=1.
  std::vector<std::string> hints = topology_hints({nvlink_pair({"SHM/direct/direct"})}, {{"NCCL_P2P_DISABLE", "1"}});
  ASSERT_EQ(hints.size(), 1u);
  EXPECT_NE(hints[0].find("GPU pair 0-1 has NVLink4 x18 (NVSwitch) but NCCL moves their data through host shared memory"),
            std::string::npos)
      << hints[0];
  EXPECT_NE(hints[0].find("crossing PCIe twice"), std::string::npos) << hints[0];
  EXPECT_NE(hints[0].find("NCCL_P2P_DISABLE=1 is set: unset it"), std::string::npos) << hints[0];
  // The network, with SHM disabled too; several pairs in one line.
  GpuPair second = nvlink_pair({"NET/Socket/0"});
  second.b = 2;
  hints = topology_hints({nvlink_pair({"NET/Socket/0"}), second},
                         {{"NCCL_P2P_DISABLE", "1"}, {"NCCL_SHM_DISABLE", "1"}});
  ASSERT_EQ(hints.size(), 1u);
  EXPECT_NE(hints[0].find("GPU pairs 0-1, 0-2 have"), std::string::npos) << hints[0];
  EXPECT_NE(hints[0].find("network stack (NET)"), std::string::npos) << hints[0];
  EXPECT_NE(hints[0].find("NCCL_SHM_DISABLE=1 is set as well"), std::string::npos) << hints[0];
  // No peer access over NVLink.
  GpuPair no_p2p = nvlink_pair({});
  no_p2p.p2p_ab = no_p2p.p2p_ba = false;
  hints = topology_hints({no_p2p}, {});
  ASSERT_EQ(hints.size(), 1u);
  EXPECT_NE(hints[0].find("CUDA reports no peer access"), std::string::npos) << hints[0];
  // PCIe pairs on SHM: not the NVLink case.
  GpuPair pcie;
  pcie.nvml = true;
  pcie.nccl = {"SHM/direct/direct"};
  EXPECT_TRUE(topology_hints({pcie}, {}).empty());
}

TEST(TopologyCli, WithoutAGpuIsOneLineAndExitTwo) {
  testing::TrainOutcome o = testing::run_train("", "topology");
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.out.find("train topology"), std::string::npos) << o.out;
  EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 1) << o.out;
  o = testing::run_train("", "topology --no-such-flag");
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.out.find("--no-such-flag"), std::string::npos) << o.out;
}

}  // namespace
}  // namespace vitddp
