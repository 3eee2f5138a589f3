// Sweep files (configs/sweeps/*.json) for `train bench --sweep FILE`: a named list of runs, each a
// set of train flags plus environment variables, checked completely before anything runs.
//
//   {"name": "seed_article_2gpu", "description": "...", "baseline": "no DDP, 1 GPU",
//    "defaults": {"model": "vit_l_32", "steps": 20, "env": {"NCCL_NVLS_ENABLE": "0"}},
//    "runs": [{"label": "no DDP, 1 GPU", "gpus": 1},
//             {"label": "DDP 2 GPUs, bf16", "gpus": 2, "hook": "bf16",
//              "env": {"NCCL_P2P_DISABLE": "1"}}]}
//
// The flags a run may set come from the caller (SweepSchema: the train flag names, optionally
// with their types), so this parser stays independent of TrainConfig; "label" and "env" are
// the sweep's own keys, and env names are limited to the NCCL settings in allowed_sweep_env().
// "defaults" holds flags and env shared by every run; a run's own values override them.
// Accuracy (Note [Accuracy beside speed] in train/bench/accuracy.h): "seeds" launches the run once
// per seed (N: seeds 0..N-1, or a list), "target" names the quality to reach, {"eval_top1": 0.95}
// or {"eval_loss": 0.3}; a target needs "eval-data".
// Every error is one line naming the file, the run (runs[i] and its label) and the key.
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/bench/accuracy.h"

namespace vitddp::bench {

// What a flag's value must be. kAny accepts any scalar (boolean, number, string).
enum class FlagType { kAny, kBool, kInteger, kNumber, kString };

class SweepSchema {
 public:
  SweepSchema() = default;
  // Flag names only: any scalar value.
  SweepSchema(const std::vector<std::string>& flag_names);  // NOLINT: implicit, so a name list will do
  SweepSchema(std::initializer_list<std::string> flag_names) : SweepSchema(std::vector<std::string>(flag_names)) {}
  // Typed by example: each key of `defaults` (e.g. TrainConfig().to_json()) with the type of its value.
  static SweepSchema from_defaults(const nlohmann::json& defaults);

  void add(const std::string& name, FlagType type = FlagType::kAny) { flags_[name] = type; }
  // nullptr when the flag is unknown.
  const FlagType* find(const std::string& name) const;
  std::string known_names() const;  // "a, b, c" for error messages

 private:
  std::map<std::string, FlagType> flags_;
};

// Environment variables a run may set (NCCL transport and tuning knobs).
const std::vector<std::string>& allowed_sweep_env();

struct SweepRun {
  std::string label;
  std::vector<std::pair<std::string, nlohmann::json>> flags;  // in file order; scalar values
  std::vector<std::pair<std::string, std::string>> env;      // in file order
  std::vector<int64_t> seeds;             // one launch per seed (--seed S); empty: one launch
  std::optional<AccuracyTarget> target;   // the quality its evaluations should reach

  // "gpus" if set, else "procs", else 1: the workers this run uses (for scaling efficiency).
  int workers() const;
  // The flags as command-line arguments: {"--gpus", "2", "--static-graph", "--hook", "bf16"};
  // false booleans become "--flag=false", and names `is_flag` refuses (expert keys) "--set",
  // "name=value".
  std::vector<std::string> to_args(const std::function<bool(const std::string&)>& is_flag = {}) const;
};

struct Sweep {
  std::string source;  // the file it came from
  std::string name;
  std::string description;
  std::vector<SweepRun> runs;
  size_t baseline = 0;  // index into runs: "baseline" names its label; default the first run
};

// Parses sweep JSON text; `source` names it in errors. Throws vitddp::Error.
Sweep parse_sweep(const std::string& text, const std::string& source, const SweepSchema& schema);
// Reads and parses a sweep file. Throws vitddp::Error (unreadable file included).
Sweep parse_sweep_file(const std::string& path, const SweepSchema& schema);

}  // namespace vitddp::bench
