// What a training run reports: the result the summary line says and --json prints.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/vit/vit_config.h"
#include "train/auto_settings.h"
#include "train/config.h"

namespace vitddp {

struct RunResult {
  std::string device;
  VitConfig model;
  int64_t parameters = 0;
  int world_size = 1;
  std::string backend;                // the process group's ("nccl", "nccl+host-copy", "gloo"); "" without DDP
  int64_t buckets = 0;                // DDP's gradient buckets at the end of the run
  std::vector<int64_t> bucket_bytes;  // each bucket's size, in bucket order
  int64_t skipped_steps = 0;          // --nonfinite skip: steps whose update was not applied
  double grad_norm = -1;              // --clip-grad-norm: the last step's norm before clipping (-1: none)
  int64_t bad_samples = 0;            // distinct bad samples this rank's loader skipped
  nlohmann::json evals = nlohmann::json::array();  // --eval-data: each evaluation (EvalResult::to_json)
  bool stopped_early = false;         // a signal stopped the run at a step boundary
  int64_t steps = 0;                  // steps this process trained
  int64_t first_step = 1;             // the first of them (1-based; above 1 after a resume)
  nlohmann::json recovery;            // a resumed run's restore (TrainingRun::recovery); null otherwise
  nlohmann::json memory_checkpoints;  // MemoryCheckpoints::to_json(); null without
  int64_t timed_steps = 0;            // the last of them, which the rates below time
  int64_t untimed_steps = 0;          // the first of them, left out of the timing
  double seconds = 0;                 // wall time of the timed steps
  double steps_per_s = 0;
  double images_per_s = 0;
  double median_step_ms = 0;          // median of the timed steps
  double peak_memory_mib = 0;         // peak bytes allocated on the training device while timed
  double loader_images_per_s = 0;     // what the data loader delivered (0 without a loader)
  double gpu_peak_tflops = 0;         // the GPU's dense bf16 peak (train/observe/utilisation.h), 0 unknown
  double achieved_tflops_per_gpu = 0; // the model's training FLOPs per second on one GPU
  std::optional<double> mfu_pct;      // model FLOP utilisation, when the peak is known
  int64_t graph_replays = -1;         // steps replayed as a CUDA graph (-1: no graph)
  std::vector<double> losses;         // every step this process trained
  std::vector<ChosenSetting> chosen;  // the settings the program chose, with their reasons
  nlohmann::json op_breakdown;        // with --op-breakdown: [{op, ms, calls}], largest first
  nlohmann::json trace;               // with --trace (rank 0): means over the timed steps, see trace_summary
  TrainConfig config;                 // the run's settings, with the program's choices
  nlohmann::json to_json() const;
  // "summary: vit_l_32 on cuda:0 (bf16): 113.8 steps/s over 20 timed step(s) ..."
  std::string summary_line() const;
};

}  // namespace vitddp
