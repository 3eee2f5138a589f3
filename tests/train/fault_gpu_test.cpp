// Faults on 2 GPUs (NCCL) end to end, through `train --gpus 2`: a rank killed or hung at the
// start of a step (VITDDP_FAULT, see train/observe/fault_injection.h) stops the whole run with a non-zero
// exit within the timeout plus 10 s, and the output names the rank. The GPU counterparts of
// tests/train/ddp_cli_test.cpp; skipped without 2 GPUs.
#include <gtest/gtest.h>

#include "common/ddp_harness.h"
#include "common/train_process.h"

namespace vitddp {
namespace {

#define REQUIRE_TWO_GPUS()                                                              \
  do {                                                                                  \
    if (testing::gpus_without_cuda_init() < 2) GTEST_SKIP() << "needs 2 GPUs";          \
  } while (0)

const std::string kTwoGpus = "--gpus 2 --set timeout=10 --model vit_tiny --data gpu --batch-size 32 "
                             "--steps 8 --print-every 1";

testing::TrainOutcome run(const std::string& env) { return testing::run_train(env, kTwoGpus, true, 120); }

TEST(DdpCliGpu, AKilledRankStopsTheRunAndIsNamed) {
  REQUIRE_TWO_GPUS();
  testing::TrainOutcome o = run("VITDDP_FAULT=1:3:kill");
  EXPECT_EQ(o.code, 128 + 9) << o.out;  // the launcher exits with the root failure's code
  EXPECT_NE(o.out.find("launcher: rank 1 was killed by signal 9"), std::string::npos) << o.out;
  EXPECT_LT(o.seconds, 10 + 10) << o.out;
}

TEST(DdpCliGpu, AHungRankTimesOutAndIsNamed) {
  REQUIRE_TWO_GPUS();
  testing::TrainOutcome o = run("VITDDP_FAULT=1:3:hang");
  EXPECT_EQ(o.code, 4) << o.out;
  // Rank 0's watchdog names the rank that never reached the collective (Note [Naming the late
  // rank]); the launcher names rank 0 as the first failure.
  EXPECT_NE(o.out.find("did not complete within the 10000 ms timeout"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("rank 1 had not reached collective #"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("launcher: rank 0 exited with status 4"), std::string::npos) << o.out;
  EXPECT_LT(o.seconds, 10 + 10) << o.out;
}

}  // namespace
}  // namespace vitddp
