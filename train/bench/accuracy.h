// What a sweep row's setting costs in accuracy: each seed's evaluations (from its `--json` result),
// the time to a target, and the summary over seeds that the table shows beside the throughput.
//
// Note [Accuracy beside speed]
// A row launched with several seeds reports the median and range over them of the final eval
// top-1 and loss, how many seeds reached the target, and the median steps and training seconds
// to it over those that did (training seconds: wall time of the steps, evaluations left out).
// Medians of an even count take the lower middle value, as Note [Repeated launches] does: no
// figure is an average no run had. A row's accuracy is "same" as the baseline's only when its
// median top-1 lies inside the baseline's range over its seeds (the spread seeds alone make);
// outside it, "lower" or "higher". A row with a target that a seed missed is flagged "misses".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace vitddp::bench {

struct AccuracyTarget {
  std::string metric;  // "eval_top1" (reached at or above `value`) or "eval_loss" (at or below)
  double value = 0;
  std::string describe() const;  // "eval top-1 >= 0.95"
};
// The metrics a target may name.
const std::vector<std::string>& target_metrics();

struct EvalPoint {
  int64_t after_step = 0;
  double top1 = 0, loss = 0;
  double train_seconds = 0;  // training time up to this evaluation (evaluations left out)
  bool reaches(const AccuracyTarget& t) const;
};

// One launch's evaluations, in order, from its `--json` result ("evals"). Throws vitddp::Error
// naming `label` when the result has none.
std::vector<EvalPoint> evals_of(const nlohmann::json& result, const std::string& label);
// The first evaluation that reaches `target`, if any.
std::optional<EvalPoint> first_reaching(const std::vector<EvalPoint>& evals, const AccuracyTarget& target);

struct Spread {
  double median = 0, min = 0, max = 0;
};
// Over at least one value; the lower middle for an even count.
Spread spread_of(std::vector<double> values);

struct AccuracySummary {
  int seeds = 0;
  Spread top1, loss;  // of the last evaluation of each seed
  std::optional<AccuracyTarget> target;
  int reached = 0;                        // seeds that reached the target
  std::optional<Spread> steps_to_target;  // over the seeds that reached it
  std::optional<Spread> seconds_to_target;
  std::vector<std::vector<EvalPoint>> curves;  // each seed's evaluations, for the chart
};

// See Note [Accuracy beside speed]. `per_seed` holds each seed's evaluations (none empty).
AccuracySummary summarize_accuracy(const std::vector<std::vector<EvalPoint>>& per_seed,
                                   const std::optional<AccuracyTarget>& target);
// "same", "lower" or "higher" than `baseline`'s top-1 range; "misses" first when a seed missed
// the row's target ("misses, lower").
std::string accuracy_verdict(const AccuracySummary& row, const AccuracySummary& baseline);

}  // namespace vitddp::bench
