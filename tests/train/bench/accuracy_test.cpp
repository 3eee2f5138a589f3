// Note [Accuracy beside speed]: the time to a target, the aggregation over seeds, the verdict
// against the baseline's spread, and the table's accuracy columns and chart.
#include "train/bench/accuracy.h"

#include <gtest/gtest.h>

#include "train/bench/chart.h"
#include "train/bench/table.h"

namespace vitddp::bench {
namespace {

std::vector<EvalPoint> curve(std::initializer_list<std::tuple<int64_t, double, double, double>> points) {
  std::vector<EvalPoint> out;
  for (const auto& [step, top1, loss, seconds] : points) out.push_back({step, top1, loss, seconds});
  return out;
}

TEST(Accuracy, TheFirstEvaluationThatReachesTheTarget) {
  const std::vector<EvalPoint> c = curve({{100, 0.50, 1.2, 10}, {200, 0.96, 0.4, 21}, {300, 0.94, 0.3, 33}});
  const std::optional<EvalPoint> top1 = first_reaching(c, {"eval_top1", 0.95});
  ASSERT_TRUE(top1);
  EXPECT_EQ(top1->after_step, 200);
  EXPECT_EQ(top1->train_seconds, 21);
  EXPECT_EQ(first_reaching(c, {"eval_top1", 0.96})->after_step, 200);  // at the target counts
  EXPECT_EQ(first_reaching(c, {"eval_loss", 0.35})->after_step, 300);
  EXPECT_FALSE(first_reaching(c, {"eval_top1", 0.97}));
  EXPECT_FALSE(first_reaching(c, {"eval_loss", 0.1}));
}

TEST(Accuracy, SpreadsTakeTheLowerMiddleOfAnEvenCount) {
  const Spread odd = spread_of({0.3, 0.1, 0.2});
  EXPECT_EQ(odd.median, 0.2);
  EXPECT_EQ(odd.min, 0.1);
  EXPECT_EQ(odd.max, 0.3);
  EXPECT_EQ(spread_of({4, 1, 3, 2}).median, 2);
  EXPECT_EQ(spread_of({7}).median, 7);
}

TEST(Accuracy, SeedsAggregateTheLastEvaluationAndTheTimeToTargetOfThoseThatReachedIt) {
  const std::vector<std::vector<EvalPoint>> seeds = {
      curve({{100, 0.90, 0.5, 10}, {200, 0.97, 0.2, 20}}),
      curve({{100, 0.96, 0.3, 11}, {200, 0.95, 0.25, 22}}),
      curve({{100, 0.80, 0.9, 12}, {200, 0.93, 0.4, 24}}),
  };
  const AccuracySummary s = summarize_accuracy(seeds, AccuracyTarget{"eval_top1", 0.95});
  EXPECT_EQ(s.seeds, 3);
  EXPECT_EQ(s.top1.median, 0.95);
  EXPECT_EQ(s.top1.min, 0.93);
  EXPECT_EQ(s.top1.max, 0.97);
  EXPECT_EQ(s.loss.median, 0.25);
  EXPECT_EQ(s.reached, 2);
  ASSERT_TRUE(s.steps_to_target);
  EXPECT_EQ(s.steps_to_target->median, 100);  // seeds 0 and 1: 200 and 100 steps, the lower middle
  EXPECT_EQ(s.steps_to_target->max, 200);
  EXPECT_EQ(s.seconds_to_target->median, 11);
  const AccuracySummary none = summarize_accuracy(seeds, AccuracyTarget{"eval_top1", 0.99});
  EXPECT_EQ(none.reached, 0);
  EXPECT_FALSE(none.steps_to_target);
  EXPECT_FALSE(summarize_accuracy(seeds, std::nullopt).target);
}

TEST(Accuracy, SameOnlyInsideTheBaselinesSpread) {
  AccuracySummary base;
  base.seeds = 3;
  base.top1 = {0.95, 0.94, 0.96};
  AccuracySummary row = base;
  row.top1 = {0.955, 0.90, 0.99};
  EXPECT_EQ(accuracy_verdict(row, base), "same");
  row.top1.median = 0.939;
  EXPECT_EQ(accuracy_verdict(row, base), "lower");
  row.top1.median = 0.961;
  EXPECT_EQ(accuracy_verdict(row, base), "higher");
  row.target = AccuracyTarget{"eval_top1", 0.95};
  row.reached = 2;
  row.top1.median = 0.5;
  EXPECT_EQ(accuracy_verdict(row, base), "misses, lower");
}

TEST(Accuracy, TheTableShowsTheColumnsAndTheChartAMarkPerRow) {
  BenchRow base{"all-reduce", 1, 10.0, 320.0};
  base.accuracy = summarize_accuracy({curve({{50, 0.9, 0.3, 5}}), curve({{50, 0.92, 0.28, 5.5}})},
                                     AccuracyTarget{"eval_top1", 0.9});
  BenchRow lossy{"powersgd, 1", 1, 12.0, 384.0};
  lossy.accuracy = summarize_accuracy({curve({{50, 0.5, 1.3, 4}}), curve({{50, 0.6, 1.1, 4.2}})},
                                      AccuracyTarget{"eval_top1", 0.9});
  BenchRow plain{"no evaluation", 1, 11.0, 352.0};
  const std::vector<TableRow> rows = compute_table({base, lossy, plain}, base);
  EXPECT_EQ(rows[0].accuracy_verdict, "same");
  EXPECT_EQ(rows[1].accuracy_verdict, "misses, lower");
  EXPECT_EQ(rows[2].accuracy_verdict, "");
  const std::string md = table_markdown(rows);
  EXPECT_NE(md.find("| seeds | eval top-1 | eval loss | to target | accuracy |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 2 | 0.9000 (0.9000-0.9200) | 0.2800 (0.2800-0.3000) | 2/2: 50 steps, 5.0 s | same |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| 0/2: not reached | misses, lower |"), std::string::npos) << md;
  const std::string csv = table_csv(rows);
  EXPECT_NE(csv.find(",seeds,eval_top1,eval_top1_min,eval_top1_max,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",2,0.500000,0.500000,0.600000,"), std::string::npos) << csv;
  const nlohmann::json j = table_json(rows, base);
  EXPECT_EQ(j["rows"][1]["accuracy"]["reached"], 0);
  EXPECT_EQ(j["rows"][1]["accuracy_verdict"], "misses, lower");
  EXPECT_EQ(j["rows"][0]["accuracy"]["curves"].size(), 2u);
  EXPECT_FALSE(j["rows"][2].contains("accuracy"));
  const std::string svg = accuracy_chart_svg("t", rows);
  size_t marks = 0;
  for (size_t at = svg.find("<circle class=\"mark\""); at != std::string::npos; at = svg.find("<circle class=\"mark\"", at + 1))
    ++marks;
  EXPECT_EQ(marks, 2u);
  size_t loss_curves = 0;
  for (size_t at = svg.find("class=\"loss\""); at != std::string::npos; at = svg.find("class=\"loss\"", at + 1))
    ++loss_curves;
  EXPECT_EQ(loss_curves, 4u);  // two rows of two seeds
  EXPECT_NE(svg.find("class=\"target\""), std::string::npos);
}

}  // namespace
}  // namespace vitddp::bench
