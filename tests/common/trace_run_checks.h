// Checks of a --trace file written by `train`, shared by the CPU (Gloo) and GPU (NCCL) tests:
// every (rank, step) has the step, forward and backward intervals and one communication
// record per bucket; ready <= start <= end; launches in bucket-index order; the analysis keeps
// 0 <= exposed <= comm.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace vitddp::testing {

struct TracedBucket {
  int index = 0;
  double ready = 0, start = 0, end = 0;  // trace microseconds
};
struct TracedStep {
  double step_start = -1, step_end = -1, backward_start = -1, backward_end = -1, forward_end = -1;
  std::vector<TracedBucket> buckets;  // by index
};
// (rank, step) -> what the trace holds for it.
using TracedRun = std::map<std::pair<int, int64_t>, TracedStep>;

inline nlohmann::json read_trace(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

inline TracedRun traced_steps(const nlohmann::json& doc) {
  TracedRun run;
  for (const auto& e : doc["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const std::string cat = e.value("cat", ""), name = e.value("name", "");
    const int rank = e["pid"];
    const double ts = e["ts"], end = ts + e["dur"].get<double>();
    if (cat == "gpu") {
      TracedStep& s = run[{rank, e["args"]["step"].get<int64_t>()}];
      if (name.rfind("step ", 0) == 0) {
        s.step_start = ts;
        s.step_end = end;
      } else if (name == "forward") {
        s.forward_end = end;
      } else if (name == "backward") {
        s.backward_start = ts;
        s.backward_end = end;
      }
    } else if (cat == "comm") {
      TracedStep& s = run[{rank, e["args"]["step"].get<int64_t>()}];
      s.buckets.push_back({e["args"]["bucket"].get<int>(), e["args"]["ready_ts"].get<double>(), ts, end});
    }
  }
  for (auto& [key, s] : run)
    std::sort(s.buckets.begin(), s.buckets.end(), [](const TracedBucket& a, const TracedBucket& b) { return a.index < b.index; });
  return run;
}

// `slack_us`: clock slack allowed between marks taken on different streams. `buckets`: how many
// each step has; 0: any number (the reducer may rebuild its buckets after the first step).
// `in_index_order`: launches in index order before the rest go from the last bucket down
// (Note [Launch order]; by default all in index order).
inline void check_traced_run(const nlohmann::json& doc, int ranks, int64_t steps, size_t buckets, double slack_us,
                             size_t in_index_order = SIZE_MAX) {
  TracedRun run = traced_steps(doc);
  ASSERT_EQ(run.size(), static_cast<size_t>(ranks * steps)) << "one entry per rank and step";
  for (const auto& [key, s] : run) {
    SCOPED_TRACE("rank " + std::to_string(key.first) + " step " + std::to_string(key.second));
    EXPECT_GE(s.step_start, 0) << "no step interval";
    EXPECT_GE(s.forward_end, 0) << "no forward interval";
    ASSERT_GE(s.backward_start, 0) << "no backward interval";
    EXPECT_LE(s.forward_end, s.backward_start + slack_us);
    if (buckets > 0) ASSERT_EQ(s.buckets.size(), buckets) << "one communication record per bucket";
    ASSERT_FALSE(s.buckets.empty()) << "no communication records";
    for (size_t i = 0; i < s.buckets.size(); ++i) {
      const TracedBucket& b = s.buckets[i];
      EXPECT_EQ(b.index, static_cast<int>(i));
      EXPECT_LE(b.ready, b.start + slack_us) << "bucket " << i << " started before it was ready";
      EXPECT_LE(b.start, b.end) << "bucket " << i;
      EXPECT_GE(b.ready, s.backward_start - slack_us) << "bucket " << i << " ready before backward began";
      if (i > 0 && i < in_index_order)
        EXPECT_LE(s.buckets[i - 1].start, b.start + slack_us) << "launches out of index order at " << i;
      if (i > in_index_order)
        EXPECT_LE(b.start, s.buckets[i - 1].start + slack_us) << "the last buckets go from the last down, at " << i;
    }
    const size_t n = s.buckets.size();
    if (in_index_order > 0 && in_index_order < n) {
      EXPECT_LE(s.buckets[in_index_order - 1].start, s.buckets[n - 1].start + slack_us)
          << "the last bucket goes after the ready-order ones";
    }
  }
  const auto& steps_json = doc["vitddp"]["steps"];
  ASSERT_EQ(steps_json.size(), static_cast<size_t>(ranks * steps));
  for (const auto& s : steps_json) {
    EXPECT_GE(s["exposed_comm_ms"].get<double>(), 0.0);
    EXPECT_LE(s["exposed_comm_ms"].get<double>(), s["comm_ms"].get<double>() + 1e-9);
    EXPECT_GT(s["comm_ms"].get<double>(), 0.0);
    EXPECT_GT(s["backward_ms"].get<double>(), 0.0);
    EXPECT_GT(s["forward_ms"].get<double>(), 0.0);
  }
}

}  // namespace vitddp::testing
