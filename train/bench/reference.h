// The PyTorch reference beside a sweep's rows: how one of our runs maps to the reference script
// (.deps/anchors/torch_ddp_vit.py, fetched by scripts/fetch_device_deps.sh, not committed:
// torchvision's ViT under PyTorch DDP, one JSON line on rank 0).
//
// The mapping lives in reference_command() alone. A run maps when every flag it sets has a
// counterpart there or does not change what is measured (lr, seed, printing, timeouts); a
// flag with no counterpart set to a non-default value (a model dimension, --accumulate,
// --procs, ...) makes the row "no counterpart", with the reason, rather than a wrong comparison.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/bench/sweep.h"

namespace vitddp::bench {

struct ReferenceCommand {
  // python3 SCRIPT FLAGS..., or, with DDP (more than one GPU, or "ddp": true),
  // python3 -m torch.distributed.run --standalone --nproc_per_node=N SCRIPT FLAGS...
  // Empty when the run has no counterpart.
  std::vector<std::string> argv;
  std::string no_counterpart;  // why, when argv is empty: "--procs: the reference trains on GPUs"
  int gpus = 1;
};

// `train_defaults`: TrainConfig().to_json(), which supplies the values the run does not set.
ReferenceCommand reference_command(const SweepRun& run, const nlohmann::json& train_defaults,
                                   const std::string& script, const std::string& python = "python3");

}  // namespace vitddp::bench
