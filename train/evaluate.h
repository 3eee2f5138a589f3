// Evaluation of --eval-data: loss, top-1 and top-5 over every evaluation sample exactly once
// across the ranks (each rank its strided share, no padding), the counts all-reduced, on the
// weights' EMA when the run keeps one. Runs eagerly between steps, beside a graphed step (which
// stays captured).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>

#include <nlohmann/json.hpp>

#include "train/dataset_factory.h"

namespace vitddp {

struct TrainingRun;

struct EvalResult {
  int64_t after_step = 0;  // the steps trained when it ran (1-based count)
  int64_t samples = 0;     // over all ranks
  int64_t correct1 = 0, correct5 = 0;
  double loss = 0;         // mean cross-entropy, no label smoothing
  bool on_ema = false;
  // This process's training time up to the evaluation (from its first step; evaluations left
  // out): the time to an accuracy (train/bench/accuracy.h).
  double train_seconds = 0;
  double top1() const { return samples ? static_cast<double>(correct1) / samples : 0.0; }
  double top5() const { return samples ? static_cast<double>(correct5) / samples : 0.0; }
  nlohmann::json to_json() const;
  std::string summary() const;  // "eval after step 100: loss 0.4210, top-1 91.20%, top-5 99.40% (500 images, EMA)"
};

class Evaluator {
 public:
  // Opens --eval-data for this rank (one line on a bad set).
  explicit Evaluator(TrainingRun& run);
  ~Evaluator();
  // Every rank together (a collective when data-parallel); `steps_done`: for the report.
  EvalResult evaluate(int64_t steps_done);

 private:
  TrainingRun& run_;
  DataSource data_;
};

}  // namespace vitddp
