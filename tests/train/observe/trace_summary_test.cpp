// trace_summary: means over steps, the slowest rank, and per-bucket rows from the steps that
// share the last step's bucket layout (a rebuild after the first step changes it).
#include <gtest/gtest.h>

#include "train/observe/trace_summary.h"

namespace vitddp {
namespace {

StepStats step(int rank, int64_t index, double step_us, const std::vector<std::pair<int, int64_t>>& buckets,
               double comm_us) {
  StepStats s;
  s.rank = rank;
  s.step = index;
  s.start_us = 1000.0 * static_cast<double>(index);
  s.step_us = step_us;
  s.comm_us = comm_us;
  s.exposed_comm_us = comm_us / 4;
  for (auto [i, bytes] : buckets) {
    BucketStats b;
    b.index = i;
    b.bytes = bytes;
    b.ready_us = s.start_us + 10.0 * i;
    b.start_us = b.ready_us + 1;
    b.end_us = b.start_us + 100;
    b.comm_us = 100;
    b.waited_us = 1;
    s.buckets.push_back(b);
  }
  return s;
}

TEST(TraceSummary, MeansSlowestRankAndBucketsOfTheLastLayout) {
  RunStats run;
  run.steps = {step(0, 0, 900, {{0, 10}, {1, 20}, {2, 30}}, 400),  // before a rebuild: 3 buckets
               step(0, 1, 1000, {{0, 25}, {1, 35}}, 400), step(0, 2, 1100, {{0, 25}, {1, 35}}, 400),
               step(1, 0, 1200, {{0, 10}, {1, 20}, {2, 30}}, 400), step(1, 1, 1300, {{0, 25}, {1, 35}}, 400)};
  run.ranks = {{0, 3, 1000, 1100, 100}, {1, 2, 1250, 1300, 100}};
  run.slowest_rank = 1;
  nlohmann::json j = trace_summary(run);
  EXPECT_EQ(j["steps"], 5);
  EXPECT_NEAR(j["step_ms"].get<double>(), 1.1, 1e-12);  // (0.9 + 1.0 + 1.1 + 1.2 + 1.3) / 5
  EXPECT_NEAR(j["exposed_comm_ms"].get<double>(), 0.1, 1e-12);
  EXPECT_NEAR(j["overlap_pct"].get<double>(), 75.0, 1e-9);
  EXPECT_EQ(j["slowest_rank"], 1);
  ASSERT_EQ(j["buckets"].size(), 2u) << j.dump();
  EXPECT_EQ(j["buckets"][1]["bytes"], 35);
  EXPECT_NEAR(j["buckets"][1]["ready_ms"].get<double>(), 0.010, 1e-12);
  EXPECT_NEAR(j["buckets"][1]["GBps"].get<double>(), 35.0 / (100 * 1e3), 1e-12);
  EXPECT_TRUE(trace_summary(RunStats{}).empty());
}

}  // namespace
}  // namespace vitddp
