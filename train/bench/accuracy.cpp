#include "train/bench/accuracy.h"

#include <algorithm>
#include <sstream>

#include "framework/core/error.h"

namespace vitddp::bench {

const std::vector<std::string>& target_metrics() {
  static const std::vector<std::string> names{"eval_top1", "eval_loss"};
  return names;
}

std::string AccuracyTarget::describe() const {
  std::ostringstream s;
  s << (metric == "eval_top1" ? "eval top-1 >= " : "eval loss <= ") << value;
  return s.str();
}

bool EvalPoint::reaches(const AccuracyTarget& t) const {
  return t.metric == "eval_top1" ? top1 >= t.value : loss <= t.value;
}

std::vector<EvalPoint> evals_of(const nlohmann::json& result, const std::string& label) {
  VITDDP_CHECK(result.is_object() && result.contains("evals") && result["evals"].is_array() &&
                   !result["evals"].empty(),
               "\"", label, "\": its result has no evaluation (\"evals\"); the run needs --eval-data");
  std::vector<EvalPoint> out;
  for (const nlohmann::json& e : result["evals"]) {
    EvalPoint p;
    p.after_step = e.value("after_step", int64_t{0});
    p.top1 = e.value("top1", 0.0);
    p.loss = e.value("loss", 0.0);
    p.train_seconds = e.value("train_seconds", 0.0);
    out.push_back(p);
  }
  return out;
}

std::optional<EvalPoint> first_reaching(const std::vector<EvalPoint>& evals, const AccuracyTarget& target) {
  for (const EvalPoint& p : evals)
    if (p.reaches(target)) return p;
  return std::nullopt;
}

Spread spread_of(std::vector<double> values) {
  VITDDP_ASSERT(!values.empty(), "spread_of: no values");
  std::sort(values.begin(), values.end());
  return {values[(values.size() - 1) / 2], values.front(), values.back()};
}

AccuracySummary summarize_accuracy(const std::vector<std::vector<EvalPoint>>& per_seed,
                                   const std::optional<AccuracyTarget>& target) {
  VITDDP_ASSERT(!per_seed.empty(), "summarize_accuracy: no seeds");
  AccuracySummary s;
  s.seeds = static_cast<int>(per_seed.size());
  s.target = target;
  s.curves = per_seed;
  std::vector<double> top1, loss, steps, seconds;
  for (const std::vector<EvalPoint>& evals : per_seed) {
    VITDDP_ASSERT(!evals.empty(), "summarize_accuracy: a seed without evaluations");
    top1.push_back(evals.back().top1);
    loss.push_back(evals.back().loss);
    if (!target) continue;
    if (std::optional<EvalPoint> at = first_reaching(evals, *target)) {
      ++s.reached;
      steps.push_back(static_cast<double>(at->after_step));
      seconds.push_back(at->train_seconds);
    }
  }
  s.top1 = spread_of(top1);
  s.loss = spread_of(loss);
  if (!steps.empty()) {
    s.steps_to_target = spread_of(steps);
    s.seconds_to_target = spread_of(seconds);
  }
  return s;
}

std::string accuracy_verdict(const AccuracySummary& row, const AccuracySummary& baseline) {
  const double m = row.top1.median;
  const std::string side = m < baseline.top1.min ? "lower" : m > baseline.top1.max ? "higher" : "same";
  const bool misses = row.target && row.reached < row.seeds;
  return misses ? "misses, " + side : side;
}

}  // namespace vitddp::bench
