// NvtxRange as a tool sees it. The test runs tests/support/nvtx_probe.cpp (a fixed scenario of
// ranges) with nvtx3 pointed at tests/support/nvtx_recorder.cpp (NVTX_INJECTION64_PATH), which
// writes one line per push, pop and mark; then it checks the names, the "vitddp" domain and
// that ranges nest. A fresh process matters: nvtx3 looks for its tool once, at the first call.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "common/multiprocess.h"
#include "framework/core/nvtx.h"

namespace vitddp {
namespace {

static_assert(!std::is_copy_constructible_v<NvtxRange> && !std::is_copy_assignable_v<NvtxRange>);
static_assert(std::is_nothrow_move_constructible_v<NvtxRange> && std::is_nothrow_move_assignable_v<NvtxRange>);

TEST(Nvtx, RangeNamesAreStable) {
  EXPECT_EQ(nvtx_step_name(12), "step 12");
  EXPECT_EQ(nvtx_allreduce_name(3, 24 << 20), "allreduce b3 24.0MB");
  EXPECT_EQ(nvtx_allreduce_name(0, 1536 * 1024), "allreduce b0 1.5MB");
  EXPECT_EQ(nvtx_compress_name(2), "compress b2");
  EXPECT_EQ(nvtx_decompress_name(2), "decompress b2");
}

TEST(Nvtx, ColoursDifferByCategory) {
  EXPECT_NE(nvtx_argb(NvtxColor::kForward), nvtx_argb(NvtxColor::kBackward));
  EXPECT_NE(nvtx_argb(NvtxColor::kComm), nvtx_argb(NvtxColor::kCompress));
  EXPECT_EQ(nvtx_argb(NvtxColor::kComm) >> 24, 0xFFu);  // opaque
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The same scenario (moves, a double end()) with no tool named: the probe exits 0 and prints
// nothing, and the recorder, never loaded, writes no log.
TEST(Nvtx, RangesWorkWithoutATool) {
#ifndef VITDDP_NVTX_PROBE
  GTEST_SKIP() << "built without nvtx3: NVTX ranges compile to nothing";
#else
  testing::TempFolder dir("vitddp_nvtx_none");
  const std::string log = dir.path() + "/nvtx.log", out = dir.path() + "/child.out";
  const std::string cmd = std::string("env -u NVTX_INJECTION64_PATH VITDDP_NVTX_LOG='") + log + "' '" +
                          VITDDP_NVTX_PROBE + "' > '" + out + "' 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child failed: " << cmd;
  EXPECT_FALSE(std::ifstream(log).good()) << "a log was written without a tool: " << log;
  EXPECT_EQ(read_lines(out), std::vector<std::string>{}) << cmd;
#endif
}

TEST(Nvtx, InjectedToolSeesNestedRangesInVitddpDomain) {
#ifndef VITDDP_NVTX_RECORDER
  GTEST_SKIP() << "built without nvtx3: NVTX ranges compile to nothing";
#else
  ASSERT_TRUE(nvtx_enabled());
  testing::TempFolder dir("vitddp_nvtx");
  std::string log = dir.path() + "/nvtx.log";
  std::string cmd = std::string("NVTX_INJECTION64_PATH='") + VITDDP_NVTX_RECORDER + "' VITDDP_NVTX_LOG='" + log +
                    "' '" + VITDDP_NVTX_PROBE + "' > '" + dir.path() + "/child.out' 2>&1";
  int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child failed: " << cmd;

  std::vector<std::string> expected = {
      "push vitddp step 7",
      "push vitddp get batch",
      "pop vitddp",
      "push vitddp forward",
      "mark vitddp loss",
      "pop vitddp",
      "push vitddp backward",
      "push vitddp allreduce b3 24.0MB",
      "push vitddp compress b3",
      "pop vitddp",
      "pop vitddp",
      "pop vitddp",
      "push vitddp optimizer step",
      "pop vitddp",
      "pop vitddp",
  };
  std::vector<std::string> lines = read_lines(log);
  EXPECT_EQ(lines, expected);

  // Balanced per domain, whatever the exact sequence.
  int depth = 0;
  for (const auto& line : lines) {
    if (line.rfind("push ", 0) == 0) ++depth;
    if (line.rfind("pop ", 0) == 0) --depth;
    ASSERT_GE(depth, 0) << "pop without a push";
    EXPECT_NE(line.find(" vitddp"), std::string::npos) << "outside the vitddp domain: " << line;
  }
  EXPECT_EQ(depth, 0);
#endif
}

}  // namespace
}  // namespace vitddp
