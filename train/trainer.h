// The training loop of one process: batch -> forward -> loss -> backward -> optimizer step,
// with per-step progress, a summary and an optional JSON result line.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "distributed/launcher.h"
#include "models/vit/vit_config.h"
#include "train/auto_settings.h"
#include "train/config.h"

namespace vitddp {

struct RunResult {
  std::string device;
  VitConfig model;
  int64_t parameters = 0;
  int world_size = 1;
  int64_t skipped_steps = 0;          // --nonfinite skip: steps whose update was not applied
  bool stopped_early = false;         // a signal stopped the run at a step boundary
  int64_t steps = 0;                  // steps this process trained
  int64_t first_step = 1;             // the first of them (1-based; above 1 after a resume)
  int64_t timed_steps = 0;            // the last of them, which the rates below time
  int64_t untimed_steps = 0;          // the first of them, left out of the timing
  double seconds = 0;                 // wall time of the timed steps
  double steps_per_s = 0;
  double images_per_s = 0;
  double median_step_ms = 0;          // median of the timed steps
  double peak_memory_mib = 0;         // peak bytes allocated on the training device after warm-up
  double loader_images_per_s = 0;     // what the data loader delivered (0 without a loader)
  double gpu_peak_tflops = 0;         // the GPU's dense bf16 peak (train/utilisation.h), 0 unknown
  double achieved_tflops_per_gpu = 0; // the model's training FLOPs per second on one GPU
  std::optional<double> mfu_pct;      // model FLOP utilisation, when the peak is known
  std::vector<double> losses;         // every step this process trained
  std::vector<ChosenSetting> chosen;  // the settings the program chose, with their reasons
  nlohmann::json op_breakdown;        // with --op-breakdown: [{op, ms, calls}], largest first
  nlohmann::json trace;               // with --trace (rank 0): means over the timed steps, see trace_summary
  TrainConfig config;                 // the run's settings, with the program's choices
  nlohmann::json to_json() const;
};

// Resolves "auto" device and model choices; prints a note to `log` when it falls back to the
// CPU. Throws vitddp::Error on requests the machine cannot meet (naming what it has).
struct ResolvedRun {
  std::string device;  // "cpu" or "cuda:N"
  VitConfig model;
};
ResolvedRun resolve_run(const TrainConfig& config, const RankEnvironment& env, std::ostream& log);

// One process's training. With a rank environment of world size > 1 it is one rank of a
// data-parallel run (only rank 0 prints); otherwise a single-process run.
RunResult run_training(const TrainConfig& config, const RankEnvironment& env, std::ostream& out);
RunResult run_training(const TrainConfig& config, std::ostream& out);

}  // namespace vitddp
