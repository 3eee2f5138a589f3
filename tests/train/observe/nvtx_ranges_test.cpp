// The ranges a profiler sees from `train`: recorded through the NVTX injection library
// (tests/support/nvtx_recorder.cpp), no nsys needed. Two Gloo ranks, so the reducer's
// per-bucket ranges appear inside the backward range.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "framework/core/nvtx.h"

namespace vitddp {
namespace {

TEST(NvtxCli, StepForwardBackwardBucketsAndOptimizer) {
#ifndef VITDDP_NVTX_RECORDER
  GTEST_SKIP() << "built without nvtx3";
#else
  if (!nvtx_enabled()) GTEST_SKIP() << "built without nvtx3";
  auto dir = std::filesystem::temp_directory_path() / ("vitddp_nvtx_train_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string log = (dir / "ranges").string();
  std::string cmd = "CUDA_VISIBLE_DEVICES= NVTX_INJECTION64_PATH=" + std::string(VITDDP_NVTX_RECORDER) +
                    " VITDDP_NVTX_LOG=" + log + " timeout 120 " + VITDDP_TRAIN_BIN +
                    " --procs 2 --model vit_tiny --batch-size 4 --set workers=1 --steps 2 --bucket-mb 0.05 "
                    "--print-every 0 > " + (dir / "out").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(log + ".0");
  ASSERT_TRUE(in.good()) << "rank 0 recorded nothing";
  std::vector<std::string> stack, seen;
  bool bucket_inside_backward = false;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("push vitddp ", 0) == 0) {
      std::string name = line.substr(12);
      if (name.rfind("allreduce b", 0) == 0 && !stack.empty() && stack.back() == "backward")
        bucket_inside_backward = true;
      stack.push_back(name);
      seen.push_back(name);
    } else if (line.rfind("pop vitddp", 0) == 0) {
      ASSERT_FALSE(stack.empty()) << "pop without push";
      stack.pop_back();
    }
  }
  EXPECT_TRUE(stack.empty()) << "unbalanced ranges, open: " << stack.back();
  for (const char* name : {"step 1", "step 2", "get batch", "forward", "backward", "optimizer step"})
    EXPECT_NE(std::find(seen.begin(), seen.end(), name), seen.end()) << name;
  EXPECT_TRUE(bucket_inside_backward) << "no 'allreduce bN ...MB' range inside 'backward'";
  std::filesystem::remove_all(dir);
#endif
}

}  // namespace
}  // namespace vitddp
