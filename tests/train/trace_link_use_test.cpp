// scripts/trace_link_use.py over a real trace: 2 Gloo ranks train with --trace; the script names
// every bucket on both ranks, and the busy share it reports stays within the step although Gloo
// runs collectives side by side (it takes their intervals' union). A missing file fails cleanly.
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>

#include "common/multiprocess.h"
#include "common/run_checks.h"
#include "common/train_process.h"

namespace vitddp {
namespace {

// `cmd`'s exit status and its stdout and stderr together.
std::pair<int, std::string> run_script(const std::string& args) {
  const std::string cmd = std::string(VITDDP_PYTHON3) + " " + VITDDP_SOURCE_DIR + "/scripts/trace_link_use.py " + args;
  std::string out;
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  if (!pipe) return {-1, "popen failed"};
  char buf[512];
  while (fgets(buf, sizeof buf, pipe)) out += buf;
  return {pclose(pipe), out};
}

TEST(TraceLinkUse, NamesEveryBucketAndABusyShareWithinTheStep) {
  // The script needs only the standard library: any python3 that runs.
  if (std::string(VITDDP_PYTHON3).empty()) GTEST_SKIP() << "no python3 found at configure time";
  testing::TempFolder dir("vitddp_trace_link");
  const std::string trace = (dir / "run.trace.json").string();
  const testing::TrainOutcome run =
      testing::run_train("", testing::kTwoTinyGlooRanks + " --steps 14 --json --trace " + trace);
  ASSERT_EQ(run.code, 0) << run.out;
  const auto [status, out] = run_script(trace);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("rank 0: bucket"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1: bucket"), std::string::npos) << out;
  // As many bucket lines per rank as the run had buckets.
  const nlohmann::json result = run.json();
  ASSERT_TRUE(result.is_object()) << run.out;
  const int buckets = result["buckets"].get<int>();
  ASSERT_GT(buckets, 1) << run.out;
  const std::regex bucket_line("\\n  b\\d+ ");
  const std::regex busy_line("busy [0-9.]+ ms of a [0-9.]+ ms step \\((\\d+)%\\)");
  int lines = 0, busy_lines = 0;
  for (std::sregex_iterator it(out.begin(), out.end(), bucket_line), end; it != end; ++it) ++lines;
  EXPECT_EQ(lines, 2 * buckets) << out;
  for (std::sregex_iterator it(out.begin(), out.end(), busy_line), end; it != end; ++it) {
    ++busy_lines;
    EXPECT_LE(std::stoi((*it)[1]), 100) << out;
  }
  EXPECT_EQ(busy_lines, 2) << out;

  const auto [missing_status, missing_out] = run_script((dir / "none.json").string());
  EXPECT_NE(missing_status, 0) << missing_out;
}

}  // namespace
}  // namespace vitddp
