// `train bench transfer`: a run's state (weights, AdamW's moments, PowerSGD's buffers) moved
// from one process to another's replica through the transfer engine, on shm and tcp within a
// host and on tcp between two network namespaces; every byte must arrive (the receiver's CRC-32
// against the sender's), and the JSON line says what moved. Bad flags are one line.
#include <gtest/gtest.h>

#include <future>
#include <string>

#include "common/multiprocess.h"
#include "common/run_checks.h"
#include "common/train_process.h"
#include "common/two_hosts.h"

namespace vitddp {
namespace {

using testing::TrainOutcome;

#if VITDDP_WITH_LIBFABRIC

const std::string kState =
    "bench transfer --model vit_tiny --optimizer adamw --hook powersgd --batch-size 2 --repeats 2 --set timeout=30 "
    "--json";

void expect_whole_state(const TrainOutcome& o) {
  ASSERT_EQ(o.code, 0) << o.out;
  const nlohmann::json j = o.json();
  ASSERT_TRUE(j.is_object()) << o.out;
  EXPECT_EQ(j["bench"], "transfer") << o.out;
  EXPECT_TRUE(j["verified"].get<bool>()) << o.out;
  EXPECT_EQ(j["optimizer"], "adamw") << o.out;
  // vit_tiny's 81,226 f32 weights, two AdamW moments of each, and PowerSGD's error buffers (one
  // per bucket, as large as its gradients) besides their P and Q: more than four times the weights.
  EXPECT_GT(j["bytes"].get<int64_t>(), 4 * 81226 * 4) << o.out;
  EXPECT_GT(j["tensors"].get<int64_t>(), 20) << o.out;
  EXPECT_EQ(j["list_seconds"].size(), 2u) << o.out;
  EXPECT_GT(j["list_gbps"].get<double>(), 0) << o.out;
  EXPECT_GT(j["loop_gbps"].get<double>(), 0) << o.out;
  EXPECT_GT(j["list_vs_loop_paired"].get<double>(), 0) << o.out;
}

TEST(TransferBench, MovesEveryTensorOfTheStateOverShm) {
  TrainOutcome o = testing::run_train("", kState + " --provider shm");
  expect_whole_state(o);
  EXPECT_EQ(o.json()["provider"], "shm") << o.out;
}

TEST(TransferBench, MovesEveryTensorOfTheStateOverTcp) {
  TrainOutcome o = testing::run_train("", kState + " --provider tcp");
  expect_whole_state(o);
  EXPECT_EQ(o.json()["provider"], "tcp;ofi_rxm") << o.out;
}

TEST(TransferBench, MovesEveryTensorBetweenTwoHosts) {
  testing::TwoHosts hosts;
  REQUIRE_TWO_HOSTS(hosts);
  testing::TempFolder dir("vitddp_transfer_hosts");
  auto node = [&](int h) {
    return testing::run_train(hosts.on(h), kState + " --provider tcp --nnodes 2 --set node-rank=" + std::to_string(h) +
                                               " --rendezvous " + dir.path() + "/rdzv");
  };
  std::future<TrainOutcome> second = std::async(std::launch::async, node, 1);
  TrainOutcome first = node(0);
  TrainOutcome other = second.get();
  ASSERT_EQ(other.code, 0) << other.out;
  expect_whole_state(first);
}

#endif

TEST(TransferBench, BadFlagsAreOneLine) {
  testing::expect_refused_in_one_line("bench transfer --provider zip", "--provider must be tcp or shm");
  testing::expect_refused_in_one_line("bench transfer --repeats 0", "--repeats must be in [1, 1000]");
#if VITDDP_WITH_LIBFABRIC
  testing::expect_refused_in_one_line("bench transfer --procs 3", "runs on two ranks");
  testing::expect_refused_in_one_line("bench transfer --resume --checkpoint-dir /tmp/x", "trains its state for itself");
#else
  testing::expect_refused_in_one_line("bench transfer", "this build has no transfer engine");
#endif
}

}  // namespace
}  // namespace vitddp
