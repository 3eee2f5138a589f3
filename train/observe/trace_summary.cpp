#include "train/observe/trace_summary.h"

#include <cstdio>
#include <map>
#include <ostream>

namespace vitddp {

nlohmann::json trace_summary(const RunStats& run) {
  if (run.steps.empty()) return nlohmann::json::object();
  double step = 0, forward = 0, backward = 0, comm = 0, exposed = 0;
  for (const StepStats& s : run.steps) {
    step += s.step_us;
    forward += s.forward_us;
    backward += s.backward_us;
    comm += s.comm_us;
    exposed += s.exposed_comm_us;
  }
  const double n = static_cast<double>(run.steps.size());
  auto ms = [&](double total_us) { return total_us / n / 1e3; };
  nlohmann::json j;
  j["steps"] = run.steps.size();
  j["step_ms"] = ms(step);
  j["forward_ms"] = ms(forward);
  j["backward_ms"] = ms(backward);
  j["comm_ms"] = ms(comm);
  j["exposed_comm_ms"] = ms(exposed);
  j["overlap_pct"] = comm > 0 ? 100.0 * (1.0 - exposed / comm) : 100.0;
  j["slowest_rank"] = run.slowest_rank;
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankStats& r : run.ranks)
    ranks.push_back({{"rank", r.rank},
                     {"mean_step_ms", r.mean_step_us / 1e3},
                     {"max_step_ms", r.max_step_us / 1e3},
                     {"mean_exposed_comm_ms", r.mean_exposed_comm_us / 1e3}});
  j["ranks"] = ranks;

  struct Sums {
    int64_t bytes = 0;
    double ready = 0, start = 0, end = 0, comm = 0, waited = 0;
    int count = 0;
  };
  std::map<int, Sums> buckets;
  const int first_rank = run.steps.front().rank;
  // Rank 0's last step gives the bucket layout; steps with another one (before the reducer
  // rebuilt its buckets) stay out of the per-bucket means.
  const StepStats* last = nullptr;
  for (const StepStats& s : run.steps)
    if (s.rank == first_rank) last = &s;
  auto same_layout = [&](const StepStats& s) {
    if (s.buckets.size() != last->buckets.size()) return false;
    for (size_t k = 0; k < s.buckets.size(); ++k)
      if (s.buckets[k].index != last->buckets[k].index || s.buckets[k].bytes != last->buckets[k].bytes) return false;
    return true;
  };
  for (const StepStats& s : run.steps) {
    if (s.rank != first_rank || !same_layout(s)) continue;
    for (const BucketStats& b : s.buckets) {
      Sums& sum = buckets[b.index];
      sum.bytes = b.bytes;
      sum.ready += b.ready_us - s.start_us;
      sum.start += b.start_us - s.start_us;
      sum.end += b.end_us - s.start_us;
      sum.comm += b.comm_us;
      sum.waited += b.waited_us;
      sum.count += 1;
    }
  }
  nlohmann::json bucket_rows = nlohmann::json::array();
  for (const auto& [index, sum] : buckets) {
    const double c = sum.count;
    bucket_rows.push_back({{"index", index},
                           {"bytes", sum.bytes},
                           {"ready_ms", sum.ready / c / 1e3},
                           {"start_ms", sum.start / c / 1e3},
                           {"end_ms", sum.end / c / 1e3},
                           {"comm_ms", sum.comm / c / 1e3},
                           {"waited_ms", sum.waited / c / 1e3},
                           {"GBps", sum.comm > 0 ? static_cast<double>(sum.bytes) * c / (sum.comm * 1e3) : 0.0}});
  }
  j["buckets"] = bucket_rows;
  return j;
}

void print_trace_summary(const nlohmann::json& summary, const std::string& path, std::ostream& out) {
  if (summary.empty()) {
    out << "trace: " << path << " (no timed step to analyse)\n";
    return;
  }
  char line[512];
  std::snprintf(line, sizeof line,
                "trace: %s: mean over %d rank-steps: step %.2f ms, forward %.2f, backward %.2f, all-reduce %.2f ms of "
                "which exposed %.2f (overlap %.1f%%)",
                path.c_str(), summary["steps"].get<int>(), summary["step_ms"].get<double>(),
                summary["forward_ms"].get<double>(), summary["backward_ms"].get<double>(),
                summary["comm_ms"].get<double>(), summary["exposed_comm_ms"].get<double>(),
                summary["overlap_pct"].get<double>());
  out << line;
  if (summary["ranks"].size() > 1) {
    for (const auto& r : summary["ranks"])
      if (r["rank"] == summary["slowest_rank"]) {
        std::snprintf(line, sizeof line, "; slowest rank %d (%.2f ms per step)", r["rank"].get<int>(),
                      r["mean_step_ms"].get<double>());
        out << line;
      }
  }
  out << "\n";
  if (summary["buckets"].empty()) return;
  out << "trace: bucket      MB   ready   start     end    comm  waited    GB/s  (ms from step start, rank "
      << "0's mean)\n";
  for (const auto& b : summary["buckets"]) {
    std::snprintf(line, sizeof line, "trace: %6d %7.1f %7.2f %7.2f %7.2f %7.2f %7.2f %7.1f\n", b["index"].get<int>(),
                  b["bytes"].get<double>() / 1e6, b["ready_ms"].get<double>(), b["start_ms"].get<double>(),
                  b["end_ms"].get<double>(), b["comm_ms"].get<double>(), b["waited_ms"].get<double>(),
                  b["GBps"].get<double>());
    out << line;
  }
}

}  // namespace vitddp
