// The --trace timeline on the CPU: interval arithmetic, exposed communication on synthetic
// timelines whose answer is known (fully hidden, fully exposed, partly overlapping, nested and
// overlapping compute), its invariants against a brute-force count, per-bucket waits and
// bandwidth, the slowest rank, the Chrome trace's structure, and bad --trace paths.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "common/multiprocess.h"
#include "common/test_utils.h"
#include "train/observe/trace.h"

namespace vitddp {
namespace {

GpuInterval compute(const char* name, double start, double end, int64_t step = 0, int rank = 0) {
  return GpuInterval{name, rank, step, GpuStream::kCompute, start, end};
}
GpuInterval comm(const char* name, double start, double end, int64_t step = 0, int rank = 0) {
  return GpuInterval{name, rank, step, GpuStream::kComm, start, end};
}
BucketRecord bucket(int index, int64_t bytes, double ready, double start, double end, int64_t step = 0, int rank = 0) {
  return BucketRecord{rank, step, index, bytes, ready, start, end};
}

TEST(TraceIntervals, UnionCountsOverlapsOnce) {
  EXPECT_DOUBLE_EQ(union_length_us({}), 0);
  EXPECT_DOUBLE_EQ(union_length_us({{0, 10}, {5, 15}, {20, 30}}), 25);
  EXPECT_DOUBLE_EQ(union_length_us({{0, 100}, {10, 20}, {30, 40}}), 100);  // nested
  EXPECT_DOUBLE_EQ(union_length_us({{0, 10}, {10, 20}}), 20);              // touching
  EXPECT_DOUBLE_EQ(union_length_us({{5, 5}, {9, 3}}), 0);                  // empty, reversed
}

TEST(TraceIntervals, UncoveredSubtractsTheCover) {
  EXPECT_DOUBLE_EQ(uncovered_length_us({{0, 10}}, {}), 10);
  EXPECT_DOUBLE_EQ(uncovered_length_us({{0, 10}}, {{0, 10}}), 0);
  EXPECT_DOUBLE_EQ(uncovered_length_us({{0, 10}}, {{2, 4}, {6, 8}}), 6);
  EXPECT_DOUBLE_EQ(uncovered_length_us({{0, 10}, {20, 30}}, {{5, 25}}), 10);
  EXPECT_DOUBLE_EQ(uncovered_length_us({{0, 10}}, {{-5, 3}, {1, 2}, {8, 50}}), 5);
}

TEST(TraceAnalysis, FullyHiddenCommunication) {
  StepTimeline t;
  t.gpu = {compute("forward", 0, 40), compute("backward", 40, 100)};
  t.buckets = {bucket(0, 1 << 20, 50, 50, 70), bucket(1, 1 << 20, 80, 80, 95)};
  StepStats s = analyze_step(t);
  EXPECT_DOUBLE_EQ(s.forward_us, 40);
  EXPECT_DOUBLE_EQ(s.backward_us, 60);
  EXPECT_DOUBLE_EQ(s.comm_us, 35);
  EXPECT_DOUBLE_EQ(s.exposed_comm_us, 0);
  EXPECT_DOUBLE_EQ(s.overlap_pct, 100);
}

TEST(TraceAnalysis, FullyExposedCommunication) {
  StepTimeline t;
  t.gpu = {compute("forward", 0, 20), compute("backward", 20, 50), compute("optimizer step", 100, 110)};
  t.buckets = {bucket(0, 1 << 20, 50, 60, 100)};
  StepStats s = analyze_step(t);
  EXPECT_DOUBLE_EQ(s.comm_us, 40);
  EXPECT_DOUBLE_EQ(s.exposed_comm_us, 40);
  EXPECT_DOUBLE_EQ(s.overlap_pct, 0);
  EXPECT_DOUBLE_EQ(s.compute_us, 60);
}

TEST(TraceAnalysis, PartlyOverlappingCommunication) {
  StepTimeline t;
  t.gpu = {compute("forward", 0, 30), compute("backward", 30, 100)};
  t.buckets = {bucket(0, 1 << 20, 70, 80, 130)};
  StepStats s = analyze_step(t);
  EXPECT_DOUBLE_EQ(s.comm_us, 50);
  EXPECT_DOUBLE_EQ(s.exposed_comm_us, 30);
  EXPECT_DOUBLE_EQ(s.overlap_pct, 40);
}

TEST(TraceAnalysis, NestedAndOverlappingComputeCountOnce) {
  StepTimeline t;
  // A layer nested in backward, and an op overlapping its end: compute is busy over [0, 110].
  t.gpu = {compute("forward", 0, 40), compute("backward", 40, 100), compute("layer 3", 50, 60),
           compute("accumulate", 90, 110), comm("compress b1", 96, 99)};
  // Overlapping comm (two buckets at once on a second comm stream): busy over [95, 120].
  t.buckets = {bucket(0, 1 << 20, 90, 95, 120), bucket(1, 1 << 20, 95, 100, 105)};
  StepStats s = analyze_step(t);
  EXPECT_DOUBLE_EQ(s.compute_us, 110);
  EXPECT_DOUBLE_EQ(s.backward_us, 60);
  EXPECT_DOUBLE_EQ(s.comm_us, 25);
  EXPECT_DOUBLE_EQ(s.exposed_comm_us, 10);
  EXPECT_DOUBLE_EQ(s.overlap_pct, 60);
}

TEST(TraceAnalysis, NoCommunicationMeansNothingExposed) {
  StepTimeline t;
  t.gpu = {compute("forward", 0, 10), compute("backward", 10, 30)};
  StepStats s = analyze_step(t);
  EXPECT_DOUBLE_EQ(s.comm_us, 0);
  EXPECT_DOUBLE_EQ(s.exposed_comm_us, 0);
  EXPECT_DOUBLE_EQ(s.overlap_pct, 100);
}

TEST(TraceAnalysis, BucketWaitAndBandwidth) {
  StepTimeline t;
  t.buckets = {bucket(1, 24'000'000, 300, 340, 580),  // queued 40 us behind bucket 0; 24 MB in 240 us
               bucket(0, 12'000'000, 100, 110, 300),
               bucket(2, 1'000'000, 600, 590, 600)};  // started before "ready" (clock skew): no negative wait
  StepStats s = analyze_step(t);
  ASSERT_EQ(s.buckets.size(), 3u);
  EXPECT_EQ(s.buckets[0].index, 0);  // sorted by index
  EXPECT_EQ(s.buckets[1].index, 1);
  EXPECT_DOUBLE_EQ(s.buckets[1].waited_us, 40);
  EXPECT_DOUBLE_EQ(s.buckets[1].comm_us, 240);
  EXPECT_DOUBLE_EQ(s.buckets[1].bandwidth_gbps, 100);
  EXPECT_DOUBLE_EQ(s.buckets[0].waited_us, 10);
  EXPECT_DOUBLE_EQ(s.buckets[2].waited_us, 0);
  for (const BucketStats& b : s.buckets) EXPECT_GE(b.waited_us, 0);
}

TEST(TraceAnalysis, StepTimeFromStepRangeElseSpan) {
  StepTimeline t;
  t.cpu = {CpuRange{"step 4", 0, 4, 0, 1000, 1500}, CpuRange{"forward", 0, 4, 0, 1010, 1100}};
  t.gpu = {compute("forward", 1020, 1600)};  // GPU work may end after the host range
  EXPECT_DOUBLE_EQ(analyze_step(t).step_us, 500);
  t.cpu.erase(t.cpu.begin());
  EXPECT_DOUBLE_EQ(analyze_step(t).step_us, 590);
}

// Exposed comm on random timelines against a count of unit time slots (endpoints are integers,
// so counting slots is exact).
TEST(TraceAnalysis, ExposedIsWithinZeroAndCommOnRandomTimelines) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pos(0, 200), len(0, 40), count(0, 6);
  for (int trial = 0; trial < 500; ++trial) {
    StepTimeline t;
    std::vector<bool> busy_compute(260, false), busy_comm(260, false);
    for (int i = 0, n = count(rng); i < n; ++i) {
      int a = pos(rng), b = a + len(rng);
      t.gpu.push_back(compute(i % 2 ? "backward" : "forward", a, b));
      for (int x = a; x < b; ++x) busy_compute[x] = true;
    }
    for (int i = 0, n = count(rng); i < n; ++i) {
      int a = pos(rng), b = a + len(rng);
      if (i % 2)
        t.buckets.push_back(bucket(i, 1000, a, a, b));
      else
        t.gpu.push_back(comm("decompress", a, b));
      for (int x = a; x < b; ++x) busy_comm[x] = true;
    }
    int comm_slots = 0, exposed_slots = 0;
    for (size_t x = 0; x < busy_comm.size(); ++x) {
      comm_slots += busy_comm[x];
      exposed_slots += busy_comm[x] && !busy_compute[x];
    }
    StepStats s = analyze_step(t);
    ASSERT_DOUBLE_EQ(s.comm_us, comm_slots) << "trial " << trial;
    ASSERT_DOUBLE_EQ(s.exposed_comm_us, exposed_slots) << "trial " << trial;
    ASSERT_GE(s.exposed_comm_us, 0);
    ASSERT_LE(s.exposed_comm_us, s.comm_us);
    ASSERT_GE(s.overlap_pct, 0);
    ASSERT_LE(s.overlap_pct, 100);
  }
}

// Two ranks, three steps each: rank 1 is slower. Every step has a step range, forward, backward,
// and two buckets.
TraceRecorder two_rank_run() {
  TraceRecorder rec;
  for (int rank = 0; rank < 2; ++rank) {
    for (int64_t step = 0; step < 3; ++step) {
      double t0 = 1'000'000 + step * 1000.0;
      double slow = rank == 1 ? 100 : 0;
      rec.add(CpuRange{"step " + std::to_string(step), rank, step, 0, t0, t0 + 900 + slow});
      rec.add(CpuRange{"get batch", rank, step, 0, t0, t0 + 50});
      rec.add(compute("forward", t0 + 60, t0 + 300, step, rank));
      rec.add(compute("backward", t0 + 300, t0 + 700 + slow, step, rank));
      rec.add(bucket(0, 24 << 20, t0 + 500, t0 + 510, t0 + 650, step, rank));
      rec.add(bucket(1, 8 << 20, t0 + 690, t0 + 700, t0 + 760 + slow, step, rank));
      rec.add(compute("optimizer step", t0 + 780 + slow, t0 + 850 + slow, step, rank));
    }
  }
  rec.add(CpuRange{"setup", 0, -1, 0, 0, 10});  // outside any step: in the trace, not analysed
  return rec;
}

TEST(TraceRecorder, PerRankStepTimesNameTheSlowestRank) {
  RunStats run = two_rank_run().analyze();
  ASSERT_EQ(run.steps.size(), 6u);
  ASSERT_EQ(run.ranks.size(), 2u);
  EXPECT_DOUBLE_EQ(run.ranks[0].mean_step_us, 900);
  EXPECT_DOUBLE_EQ(run.ranks[1].mean_step_us, 1000);
  EXPECT_EQ(run.ranks[1].steps, 3);
  EXPECT_EQ(run.slowest_rank, 1);
  // Bucket 1 runs [700, 760] on rank 0 while backward runs to 700 and the optimizer starts at
  // 780: all 60 us exposed; bucket 0 is hidden under backward.
  EXPECT_DOUBLE_EQ(run.steps[0].exposed_comm_us, 60);
  EXPECT_DOUBLE_EQ(run.steps[0].comm_us, 200);
}

TEST(TraceRecorder, ChromeTraceHasEveryStepsForwardBackwardAndBuckets) {
  testing::TempFolder dir("vitddp_trace");
  std::string path = dir.path() + "/trace.json";
  TraceRecorder rec = two_rank_run();
  rec.write_chrome_trace(path);

  std::ifstream in(path);
  nlohmann::json doc;
  ASSERT_NO_THROW(doc = nlohmann::json::parse(in)) << "not valid JSON";
  ASSERT_TRUE(doc.contains("traceEvents"));
  ASSERT_TRUE(doc["traceEvents"].is_array());

  std::set<std::tuple<int, int64_t, std::string>> seen;  // (rank, step, what)
  std::set<int> named_processes;
  for (const auto& e : doc["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name")) << e.dump();
    std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "process_name") named_processes.insert(e["pid"].get<int>());
    if (ph != "X") continue;
    ASSERT_TRUE(e.contains("ts") && e.contains("dur") && e.contains("tid")) << e.dump();
    EXPECT_GE(e["ts"].get<double>(), 0);
    EXPECT_GE(e["dur"].get<double>(), 0);
    int rank = e["pid"];
    int64_t step = e["args"]["step"];
    std::string name = e["name"];
    if (e["cat"] == "comm") {
      EXPECT_GT(e["args"]["bytes"].get<int64_t>(), 0);
      EXPECT_GT(e["args"]["bandwidth_GBps"].get<double>(), 0);
      EXPECT_GE(e["args"]["waited_behind_earlier_us"].get<double>(), 0);
      seen.insert({rank, step, "bucket " + std::to_string(e["args"]["bucket"].get<int>())});
    } else {
      seen.insert({rank, step, std::string(e["cat"]) + " " + name});
    }
  }
  EXPECT_EQ(named_processes, (std::set<int>{0, 1}));
  for (int rank = 0; rank < 2; ++rank)
    for (int64_t step = 0; step < 3; ++step)
      for (const std::string& what :
           {std::string("gpu forward"), std::string("gpu backward"), std::string("bucket 0"), std::string("bucket 1"),
            "analysis step " + std::to_string(step)})
        EXPECT_TRUE(seen.count({rank, step, what})) << "rank " << rank << " step " << step << " lacks " << what;
  EXPECT_TRUE(seen.count({0, 0, "cpu get batch"}));

  const auto& stats = doc["vitddp"];
  EXPECT_EQ(stats["slowest_rank"], 1);
  ASSERT_EQ(stats["steps"].size(), 6u);
  for (const auto& s : stats["steps"]) {
    EXPECT_GE(s["exposed_comm_ms"].get<double>(), 0);
    EXPECT_LE(s["exposed_comm_ms"].get<double>(), s["comm_ms"].get<double>());
    EXPECT_EQ(s["buckets"].size(), 2u);
  }
  EXPECT_EQ(stats["ranks"].size(), 2u);
}

TEST(TraceRecorder, EventsRoundTripAndMergeAcrossRanks) {
  TraceRecorder all = two_rank_run();
  TraceRecorder rank0, rank1;
  for (const auto& r : all.cpu_ranges()) (r.rank == 0 ? rank0 : rank1).add(r);
  for (const auto& g : all.gpu_intervals()) (g.rank == 0 ? rank0 : rank1).add(g);
  for (const auto& b : all.buckets()) (b.rank == 0 ? rank0 : rank1).add(b);

  TraceRecorder gathered = TraceRecorder::from_json(nlohmann::json::parse(rank0.to_json().dump()));
  gathered.merge(TraceRecorder::from_json(nlohmann::json::parse(rank1.to_json().dump())));
  EXPECT_EQ(gathered.cpu_ranges().size(), all.cpu_ranges().size());
  EXPECT_EQ(gathered.gpu_intervals().size(), all.gpu_intervals().size());
  EXPECT_EQ(gathered.buckets().size(), all.buckets().size());
  EXPECT_EQ(gathered.analyze().slowest_rank, 1);
  EXPECT_EQ(gathered.chrome_trace()["vitddp"], all.chrome_trace()["vitddp"]);

  EXPECT_TRUE(testing::throws_with([] { TraceRecorder::from_json({{"cpu", 1}}); }, {"trace events", "malformed"}));
}

TEST(TraceRecorder, TracedRangeRecordsWhenTracingAndNotOtherwise) {
  TraceRecorder rec;
  double before = trace_clock_us();
  {
    TracedRange step(&rec, "step 3", NvtxColor::kStep, 1, 3);
    TracedRange forward(&rec, "forward", NvtxColor::kForward, 1, 3);
    TracedRange moved(std::move(forward));
    moved.end();
    TracedRange untraced(nullptr, "backward", NvtxColor::kBackward, 1, 3);
  }
  ASSERT_EQ(rec.cpu_ranges().size(), 2u);
  const CpuRange& forward = rec.cpu_ranges()[0];  // ended first
  const CpuRange& step = rec.cpu_ranges()[1];
  EXPECT_EQ(forward.name, "forward");
  EXPECT_EQ(step.name, "step 3");
  EXPECT_EQ(step.rank, 1);
  EXPECT_EQ(step.step, 3);
  EXPECT_GE(step.start_us, before);
  EXPECT_LE(step.start_us, forward.start_us);
  EXPECT_GE(step.end_us, forward.end_us);
  EXPECT_LE(step.end_us, trace_clock_us());
}

::testing::AssertionResult one_line_error(const std::string& path, const std::vector<std::string>& parts) {
  try {
    TraceRecorder::open(path);
  } catch (const Error& e) {
    std::string what = e.what();
    if (what.find('\n') != std::string::npos) return ::testing::AssertionFailure() << "more than one line: " << what;
    if (what.rfind("--trace " + path + ": ", 0) != 0)
      return ::testing::AssertionFailure() << "does not start with the flag and path: " << what;
    for (const auto& p : parts)
      if (what.find(p) == std::string::npos) return ::testing::AssertionFailure() << "lacks \"" << p << "\": " << what;
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no error for " << path;
}

TEST(TraceRecorder, UnwritablePathIsOneClearLineBeforeAnythingRuns) {
  testing::TempFolder dir("vitddp_trace");
  EXPECT_TRUE(one_line_error(dir.path() + "/no/such/folder/trace.json", {"does not exist"}));
  EXPECT_TRUE(one_line_error(dir.path(), {"is a folder"}));
  std::string file = dir.path() + "/plain_file";
  std::ofstream(file) << "x";
  EXPECT_TRUE(one_line_error(file + "/trace.json", {"is not a folder"}));
  EXPECT_TRUE(testing::throws_with([] { check_trace_path(""); }, {"--trace needs a file name"}));
}

TEST(TraceRecorder, OpenLeavesNoFileAndKeepsAnExistingOne) {
  testing::TempFolder dir("vitddp_trace");
  std::string path = dir.path() + "/trace.json";
  TraceRecorder rec = TraceRecorder::open(path);
  EXPECT_EQ(rec.path(), path);
  EXPECT_FALSE(std::filesystem::exists(path)) << "the check must not leave an empty file";

  std::ofstream(path) << "old";
  TraceRecorder::open(path);
  std::ifstream in(path);
  std::string content((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(content, "old");

  rec.add(compute("forward", 0, 10));
  rec.write_chrome_trace();
  std::ifstream written(path);
  EXPECT_NO_THROW(nlohmann::json::parse(written));
}

}  // namespace
}  // namespace vitddp
