// Several hosts as torchrun launches them: one `train --nnodes 2 --rendezvous DIR` per host,
// which take their node ranks in the order they arrive, or as the expert key node-rank says.
// Two network namespaces joined by a veth pair stand for two hosts (their own interfaces and
// addresses; Gloo's TCP between them), sharing the rendezvous folder as hosts share a file
// system. Making namespaces needs root (CI runs as root); elsewhere these tests say
// so and skip.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <future>
#include <string>

#include "common/multiprocess.h"
#include "common/run_checks.h"
#include "common/train_process.h"
#include "common/two_hosts.h"

namespace vitddp {
namespace {

using Outcome = testing::TrainOutcome;
using testing::TwoHosts;

const std::string kRun =
    "--model vit_tiny --batch-size 4 --steps 4 --set workers=1 --print-every 0 --bucket-mb 0.05 --hook powersgd "
    "--powersgd-start-iter 1 --set timeout=30 --json";

// Both hosts' launchers at once; host h's outcome in [h]. With `placed`, host h is node h;
// else the hosts take their places by arrival.
std::array<Outcome, 2> run_on_both(const TwoHosts& hosts, const std::string& rendezvous, const std::string& args,
                                   const std::string& env1 = "", bool placed = true) {
  auto node = [&](int h, const std::string& env) {
    const std::string place = placed ? " --set node-rank=" + std::to_string(h) : "";
    return testing::run_train(hosts.on(h, env), "--procs 2 --nnodes 2" + place + " --rendezvous " + rendezvous +
                                                    " " + args);
  };
  std::future<Outcome> second = std::async(std::launch::async, node, 1, env1);
  Outcome first = node(0, "");
  return {first, second.get()};
}

// A whole PowerSGD DDP run across the two hosts is the run of four ranks on one: the same
// losses and weights, bit for bit.
TEST(Nodes, TwoHostsOfTwoRanksTrainAsFourRanksOnOne) {
  TwoHosts hosts;
  REQUIRE_TWO_HOSTS(hosts);
  testing::TempFolder dir("vitddp_nodes");
  const auto both = run_on_both(hosts, dir.path() + "/rdzv", kRun + " --save " + dir.path() + "/two.safetensors",
                                "", /*placed=*/false);
  ASSERT_EQ(both[0].code, 0) << both[0].out << "\n--- host 1:\n" << both[1].out;
  ASSERT_EQ(both[1].code, 0) << both[1].out;
  // The hosts took node 0 and node 1 between them, whichever came first; rank 0's host reports.
  const bool first_is_node0 = both[0].out.find("launcher: node 0 of 2 (by arrival") != std::string::npos;
  const bool second_is_node0 = both[1].out.find("launcher: node 0 of 2 (by arrival") != std::string::npos;
  ASSERT_NE(first_is_node0, second_is_node0) << both[0].out << "\n--- host 1:\n" << both[1].out;
  EXPECT_NE(both[first_is_node0 ? 1 : 0].out.find("launcher: node 1 of 2 (by arrival"), std::string::npos);
  const Outcome& reporter = both[first_is_node0 ? 0 : 1];
  const nlohmann::json j = reporter.json();
  EXPECT_EQ(j["world_size"], 4) << reporter.out;
  EXPECT_EQ(j["config"]["hook"], "powersgd") << reporter.out;
  EXPECT_NE(reporter.out.find("bucket compression(s) issued"), std::string::npos) << "PowerSGD compressed:\n"
                                                                                 << reporter.out;
  EXPECT_TRUE(both[first_is_node0 ? 1 : 0].json().is_null()) << "only rank 0 reports";
  Outcome one = testing::run_train("", "--procs 4 " + kRun + " --save " + dir.path() + "/one.safetensors");
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_EQ(one.json()["losses"], j["losses"]) << one.out;
  const std::string a = testing::file_bytes(dir.path() + "/one.safetensors");
  EXPECT_GT(a.size(), 10000u);
  EXPECT_TRUE(a == testing::file_bytes(dir.path() + "/two.safetensors"))
      << "two hosts of two ranks did not save the weights of four ranks on one host";
  // The folder served this run: a second run in it would read this one's keys.
  const std::string again_args = "--procs 2 --nnodes 2 --rendezvous " + dir.path() + "/rdzv " + kRun;
  Outcome again = testing::run_train(hosts.on(0), again_args);
  EXPECT_EQ(again.code, 2) << again.out;
  EXPECT_NE(again.out.find("already holds the 2 nodes of a run; give every run a fresh folder"), std::string::npos)
      << again.out;
  Outcome placed = testing::run_train(hosts.on(0), again_args + " --set node-rank=0");
  EXPECT_EQ(placed.code, 2) << placed.out;
  EXPECT_NE(placed.out.find("already served node 0 of a run; give every run a fresh folder"), std::string::npos)
      << placed.out;
}

// A rank that dies on host 1 stops host 0's ranks too, and both launchers exit with its code,
// naming it, within the timeout.
TEST(Nodes, ARankThatDiesOnOneHostStopsBothNamingIt) {
  TwoHosts hosts;
  REQUIRE_TWO_HOSTS(hosts);
  testing::TempFolder dir("vitddp_nodes_fault");
  const auto both = run_on_both(hosts, dir.path() + "/rdzv", kRun, "VITDDP_FAULT=3:2:exit");
  EXPECT_EQ(both[1].code, 7) << both[1].out;
  EXPECT_NE(both[1].out.find("launcher: rank 3 (node 1) exited with status 7"), std::string::npos) << both[1].out;
  EXPECT_EQ(both[0].code, 7) << both[0].out;
  // Host 0 names it whether its launcher saw host 1's word first or a rank of its own lost a peer.
  EXPECT_NE(both[0].out.find("launcher: node 0: "), std::string::npos) << both[0].out;
  EXPECT_NE(both[0].out.find("rank 3 (node 1) exited with status 7"), std::string::npos) << both[0].out;
  EXPECT_LT(both[0].seconds, 30 + 15) << both[0].out;
}

TEST(Nodes, BadNodeFlagsAreOneLine) {
  testing::expect_refused_in_one_line("--procs 2 --nnodes 2", "--nnodes 2 needs --rendezvous DIR");
  testing::expect_refused_in_one_line("--procs 2 --nnodes 2 --set node-rank=2 --rendezvous /tmp/x",
                                      "node-rank 2 must be in [0, --nnodes 2)");
  testing::expect_refused_in_one_line("--procs 2 --set node-rank=1", "node-rank and --rendezvous are for several nodes");
  testing::expect_refused_in_one_line("--procs 2 --rendezvous /tmp/x", "node-rank and --rendezvous are for several");
  testing::expect_refused_in_one_line("--procs 2 --nnodes 0", "--nnodes must be in [1, 1024]");
}

}  // namespace
}  // namespace vitddp
