// The sweep table: speedup and scaling efficiency arithmetic, the markdown against a golden
// copy, CSV quoting, JSON, and the files write_table_files leaves.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/multiprocess.h"
#include "common/test_utils.h"
#include "train/bench/table.h"

namespace vitddp::bench {
namespace {

const BenchRow kBaseline{"no DDP, 1 GPU", 1, 12.0, 384.0, 0.0, 4807};

std::vector<BenchRow> rows() {
  return {kBaseline,
          {"DDP 2 GPUs, 25 MB", 2, 11.4, 729.6, 3.25, 4807},
          {"DDP 2 GPUs | P2P off", 2, 9.0, 576.0, 21.5, 5386.4}};
}

TEST(Table, SpeedupAndScalingEfficiency) {
  std::vector<TableRow> t = compute_table(rows(), kBaseline);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_DOUBLE_EQ(t[0].speedup, 1.0);
  EXPECT_DOUBLE_EQ(t[0].scaling_efficiency, 1.0);
  EXPECT_DOUBLE_EQ(t[1].speedup, 1.9);                 // 729.6 / 384
  EXPECT_DOUBLE_EQ(t[1].scaling_efficiency, 0.95);     // = 11.4 steps/s per GPU / 12.0
  EXPECT_DOUBLE_EQ(t[1].ideal_images_per_s, 768.0);
  EXPECT_DOUBLE_EQ(t[2].scaling_efficiency, 0.75);     // 9.0 / 12.0
  // Efficiency equals steps/s over the baseline's whenever the per-GPU batch is the same.
  for (const TableRow& r : t) EXPECT_NEAR(r.scaling_efficiency, r.row.steps_per_s / kBaseline.steps_per_s, 1e-12);
}

// A baseline of several workers (the CPU accuracy sweep's 4 Gloo ranks): rows of the same count
// scale by their speedup, not by a quarter of it; twice the workers double the ideal.
TEST(Table, ScalingEfficiencyIsAgainstTheBaselinesWorkers) {
  const BenchRow four{"all-reduce, 4 ranks", 4, 10.0, 1280.0, 0.0, 0};
  const std::vector<TableRow> t =
      compute_table({four, {"fp16, 4 ranks", 4, 9.0, 1152.0, 0.0, 0}, {"8 ranks", 8, 9.5, 2432.0, 0.0, 0}}, four);
  EXPECT_DOUBLE_EQ(t[0].scaling_efficiency, 1.0);
  EXPECT_DOUBLE_EQ(t[1].speedup, 0.9);
  EXPECT_DOUBLE_EQ(t[1].scaling_efficiency, 0.9);
  EXPECT_DOUBLE_EQ(t[2].ideal_images_per_s, 2560.0);
  EXPECT_DOUBLE_EQ(t[2].scaling_efficiency, 0.95);
}

TEST(Table, MarkdownMatchesGolden) {
  const std::string golden =
      "| configuration | GPUs | steps/s | images/s | speedup | scaling efficiency | exposed comm (ms) | peak memory (MiB) "
      "| MFU |\n"
      "|---|--:|--:|--:|--:|--:|--:|--:|--:|\n"
      "| no DDP, 1 GPU | 1 | 12.00 | 384.0 | 1.00x | 100.0% | 0.0 | 4807 | n/a |\n"
      "| DDP 2 GPUs, 25 MB | 2 | 11.40 | 729.6 | 1.90x | 95.0% | 3.2 | 4807 | n/a |\n"
      "| DDP 2 GPUs \\| P2P off | 2 | 9.00 | 576.0 | 1.50x | 75.0% | 21.5 | 5386 | n/a |\n";
  EXPECT_EQ(table_markdown(compute_table(rows(), kBaseline)), golden);
  // With a known peak: the utilisation, in markdown, CSV and JSON.
  BenchRow measured = kBaseline;
  measured.mfu_pct = 28.04;
  const std::vector<TableRow> t = compute_table({measured}, kBaseline);
  EXPECT_NE(table_markdown(t).find("| 4807 | 28.0% |\n"), std::string::npos) << table_markdown(t);
  EXPECT_NE(table_csv(t).find(",4807.0,28.04,ok\n"), std::string::npos) << table_csv(t);
  EXPECT_DOUBLE_EQ(table_json(t, kBaseline)["rows"][0]["mfu_pct"].get<double>(), 28.04);
}

TEST(Table, CsvQuotesLabelsAndKeepsPrecision) {
  std::string csv = table_csv(compute_table({{"a, \"quoted\"", 2, 1.23456, 10.5, 0.125, 99}}, kBaseline));
  EXPECT_EQ(csv,
            "configuration,gpus,steps_per_s,images_per_s,speedup,scaling_efficiency,exposed_comm_ms,peak_mib,mfu_pct,"
            "status\n"
            "\"a, \"\"quoted\"\"\",2,1.2346,10.500,0.0273,0.0137,0.125,99.0,,ok\n");
}

// A failed run keeps its row, with the failure where the numbers would be; a value the run did
// not report (exposed communication) and speedups without a baseline are "n/a".
TEST(Table, FailedRowsAndUnknownValues) {
  BenchRow failed{"broken", 2};
  failed.failure = "exit 2: train: error: cannot read x.safetensors";
  BenchRow unmeasured{"no trace", 2, 11.0, 704.0, std::nullopt, 4900};
  std::vector<TableRow> t = compute_table({kBaseline, failed, unmeasured}, kBaseline);
  EXPECT_EQ(t[1].speedup, 0.0);
  const std::string md = table_markdown(t);
  EXPECT_NE(md.find("| broken | 2 | failed: exit 2: train: error: cannot read x.safetensors |  |  |  |  |  |  |\n"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| no trace | 2 | 11.00 | 704.0 | 1.83x | 91.7% | n/a | 4900 | n/a |\n"), std::string::npos) << md;
  const std::string csv = table_csv(t);
  EXPECT_NE(csv.find("broken,2,,,,,,,,failed: exit 2: train: error: cannot read x.safetensors\n"), std::string::npos)
      << csv;
  EXPECT_NE(csv.find("no trace,2,11.0000,704.000,1.8333,0.9167,,4900.0,,ok\n"), std::string::npos) << csv;
  nlohmann::json j = table_json(t, kBaseline);
  EXPECT_EQ(j["rows"][1]["status"], "failed");
  EXPECT_EQ(j["rows"][1]["error"], failed.failure);
  EXPECT_TRUE(j["rows"][1]["images_per_s"].is_null());
  EXPECT_TRUE(j["rows"][2]["exposed_comm_ms"].is_null());
  EXPECT_EQ(j["rows"][2]["status"], "ok");

  // A failed baseline: the other rows keep their numbers, speedups are unknown.
  std::vector<TableRow> orphan = table_without_baseline({failed, unmeasured});
  EXPECT_NE(table_markdown(orphan).find("| no trace | 2 | 11.00 | 704.0 | n/a | n/a | n/a | 4900 |"), std::string::npos)
      << table_markdown(orphan);
  EXPECT_TRUE(table_json(orphan, failed)["rows"][1]["speedup"].is_null());
}

TEST(Table, JsonHoldsBaselineAndRows) {
  nlohmann::json j = table_json(compute_table(rows(), kBaseline), kBaseline);
  EXPECT_EQ(j["baseline"]["configuration"], "no DDP, 1 GPU");
  ASSERT_EQ(j["rows"].size(), 3u);
  EXPECT_DOUBLE_EQ(j["rows"][1]["scaling_efficiency"].get<double>(), 0.95);
  EXPECT_EQ(j["rows"][2]["gpus"], 2);
  EXPECT_DOUBLE_EQ(j["rows"][2]["peak_mib"].get<double>(), 5386.4);
}

TEST(Table, RejectsABaselineWithoutThroughputAndRowsWithoutGpus) {
  EXPECT_TRUE(testing::throws_with([] { compute_table(rows(), BenchRow{"dead", 1, 0, 0, 0, 0}); },
                                   {"baseline \"dead\" has no throughput"}));
  EXPECT_TRUE(testing::throws_with([] { compute_table({BenchRow{"x", 0, 1, 1, 0, 0}}, kBaseline); },
                                   {"row \"x\" has 0 GPUs"}));
}

TEST(Table, WritesMarkdownCsvJsonAndChart) {
  testing::TempFolder dir("vitddp_table");
  std::string stem = dir.path() + "/seed";
  auto paths = write_table_files(stem, "seed article, 2 GPUs", compute_table(rows(), kBaseline), kBaseline);
  ASSERT_EQ(paths.size(), 4u);
  for (const auto& p : paths) EXPECT_GT(std::filesystem::file_size(p), 100u) << p;
  std::ifstream md(stem + ".md");
  std::string first;
  std::getline(md, first);
  EXPECT_EQ(first, "# seed article, 2 GPUs");
  std::ifstream json(stem + ".json");
  EXPECT_NO_THROW(nlohmann::json::parse(json));
  // A header goes under the title of the markdown file and into the JSON file.
  write_table_files(stem, "t", compute_table(rows(), kBaseline), kBaseline, {{"date", "today"}, {"commit", "abc"}});
  std::ifstream md2(stem + ".md");
  std::string text((std::istreambuf_iterator<char>(md2)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("# t\n\n- date: today\n- commit: abc\n\n| configuration |", 0), 0u) << text;
  std::ifstream json2(stem + ".json");
  EXPECT_EQ(nlohmann::json::parse(json2)["header"]["commit"], "abc");
  EXPECT_TRUE(testing::throws_with(
      [&] { write_table_files(dir.path() + "/missing/x", "t", compute_table(rows(), kBaseline), kBaseline); },
      {"cannot write", "missing/x.md"}));
}

// The row of a repeated configuration is the launch with the median images/s, the lower middle
// one for an even count; the launches' order does not matter.
TEST(Table, MedianLaunchIsTheLowerMiddleOne) {
  auto launch = [](double images_per_s) { return BenchRow{"r", 2, images_per_s / 64, images_per_s, 0.0, 1}; };
  EXPECT_EQ(median_launch_index({launch(5)}), 0u);
  EXPECT_EQ(median_launch_index({launch(9), launch(5)}), 1u);                        // 5 < 9: the lower
  EXPECT_EQ(median_launch_index({launch(9), launch(1), launch(5)}), 2u);             // 1 5 9
  EXPECT_EQ(median_launch_index({launch(7), launch(9), launch(1), launch(5)}), 3u);  // 1 5 | 7 9
  EXPECT_THROW(median_launch_index({}), Error);
}

// Rows launched more than once carry a last column (the range of their launches' steps/s) in
// markdown, every launch in CSV (before "status") and JSON; a failed row keeps the column count.
TEST(Table, RepeatedRowsShowTheirLaunches) {
  std::vector<BenchRow> r = rows();
  r[1].launch_steps_per_s = {11.4, 10.9, 11.6};
  r[2].failure = "launch 2 of 3: exit 1";
  const std::vector<TableRow> t = compute_table(r, kBaseline);
  const std::string md = table_markdown(t);
  EXPECT_NE(md.find("| MFU | launches (steps/s) |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n"), std::string::npos) << md;
  EXPECT_NE(md.find("| 10.90-11.60 (3) |\n"), std::string::npos) << md;
  std::istringstream lines(md);
  int table_lines = 0;
  for (std::string line; std::getline(lines, line); ++table_lines)  // every line: 11 cell borders
    EXPECT_EQ(std::count(line.begin(), line.end(), '|') - std::count(line.begin(), line.end(), '\\'), 11) << line;
  EXPECT_EQ(table_lines, 5);
  const std::string csv = table_csv(t);
  EXPECT_NE(csv.find(",mfu_pct,launch_steps_per_s,status\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",11.4000;10.9000;11.6000,ok\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("| P2P off,2," + std::string(8, ',') + "failed: launch 2 of 3: exit 1\n"), std::string::npos) << csv;
  const nlohmann::json j = table_json(t, kBaseline);
  EXPECT_EQ(j["rows"][1]["launch_steps_per_s"], nlohmann::json({11.4, 10.9, 11.6}));
  EXPECT_FALSE(j["rows"][0].contains("launch_steps_per_s"));
  // Without repeated rows the table is as it always was.
  EXPECT_EQ(table_markdown(compute_table(rows(), kBaseline)).find("launches"), std::string::npos);
}

}  // namespace
}  // namespace vitddp::bench
