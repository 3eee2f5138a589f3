// The comparison table of a sweep: one row per configuration with its throughput, speedup over
// the single-GPU baseline, scaling efficiency, exposed communication, peak memory and model FLOP
// utilisation (train/observe/utilisation.h), written as
// markdown (for the terminal and docs), CSV (for spreadsheets) and JSON (for scripts).
//
// Note [Speedup and scaling efficiency]
// Data parallelism keeps the batch per GPU fixed, so a perfect N-GPU run keeps the baseline's
// steps/s and processes N times its images/s. Speedup is images/s over the baseline's images/s;
// scaling efficiency is speedup / GPUs. With the same per-GPU batch that is each GPU's steps/s
// over the baseline's steps/s (1.0 = linear scaling). Images/s rather than steps/s keeps both
// right when a configuration changes the batch.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/bench/accuracy.h"

namespace vitddp::bench {

struct BenchRow {
  std::string label;
  int gpus = 1;
  double steps_per_s = 0;
  double images_per_s = 0;
  std::optional<double> exposed_comm_ms;  // mean per step; empty when the run did not measure it ("n/a")
  double peak_mib = 0;                    // peak device memory (MiB = 2^20 bytes)
  std::string failure;                    // empty when the run succeeded, else what happened ("exit 2: ...")
  std::optional<double> mfu_pct;          // model FLOP utilisation per GPU, when the GPU's peak is known
  // `train bench --repeat N`: every launch's steps/s in launch order; the row itself is the
  // launch with the median images/s (Note [Repeated launches] in bench_command.cpp). Empty for
  // a row launched once.
  std::vector<double> launch_steps_per_s;
  // Rows that evaluate: the accuracy over their seeds (Note [Accuracy beside speed]).
  std::optional<AccuracySummary> accuracy;
};

struct TableRow {
  BenchRow row;
  double speedup = 0;             // images/s over the baseline's
  double scaling_efficiency = 0;  // speedup / (gpus / the baseline's gpus)
  double ideal_images_per_s = 0;  // the baseline's images/s x gpus / its gpus (linear scaling)
  std::string accuracy_verdict;   // against the baseline's seeds (accuracy_verdict()); "" when unknown
};

// See Note [Speedup and scaling efficiency]. Throws vitddp::Error when the baseline has no
// throughput or a row has gpus < 1. A failed row gets speedup and efficiency 0.
std::vector<TableRow> compute_table(const std::vector<BenchRow>& rows, const BenchRow& baseline);
// The rows with speedup and efficiency unknown (NaN, written "n/a"): for a failed baseline.
std::vector<TableRow> table_without_baseline(const std::vector<BenchRow>& rows);

// Lines written under the title of the markdown file and as "header" in the JSON file:
// {"date", "2025-01-31 12:00 UTC"}, {"GPU", "NVIDIA H200"}, {"commit", "<short hash>"}.
using TableHeader = std::vector<std::pair<std::string, std::string>>;

// Among launches of one configuration that all succeeded (at least one): the index of the one
// with the median images/s, the lower middle one for an even count (Note [Repeated launches]
// in bench_command.cpp). Throws vitddp::Error for none.
size_t median_launch_index(const std::vector<BenchRow>& launches);

// Markdown: a failed row shows its failure in place of the numbers; unmeasured values are "n/a".
// When a row has accuracy, every format adds its columns: seeds, eval top-1 and loss (median and
// range), seeds that reached the target with the median steps and training seconds to it, and
// the verdict against the baseline (markdown "eval top-1", "eval loss", "to target", "accuracy").
// CSV: a last column "status" ("ok" or the failure); JSON: "status" and, when failed, "error".
// Rows launched more than once add a column: markdown "launches (steps/s)" (lowest to highest
// and how many), CSV "launch_steps_per_s" (all, ';'-separated, before "status"), JSON the array.
std::string table_markdown(const std::vector<TableRow>& rows);
std::string table_csv(const std::vector<TableRow>& rows);
nlohmann::json table_json(const std::vector<TableRow>& rows, const BenchRow& baseline);

// "# TITLE", the header as "- key: value" lines, then the markdown table: what STEM.md holds.
std::string table_document(const std::string& title, const std::vector<TableRow>& rows,
                           const TableHeader& header = {});

// Writes STEM.md, STEM.csv, STEM.json and STEM.svg (the chart), and with accuracy
// STEM.accuracy.svg (throughput against accuracy); returns the paths written.
// Throws vitddp::Error naming a file that cannot be written.
std::vector<std::string> write_table_files(const std::string& stem, const std::string& title,
                                           const std::vector<TableRow>& rows, const BenchRow& baseline,
                                           const TableHeader& header = {});

}  // namespace vitddp::bench
