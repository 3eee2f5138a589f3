// Which device a training process takes: --device, --gpus and --procs, and the rank environment
// of our launcher or of an outside one (mpirun, srun). Pure, so that it is tested without GPUs.
#pragma once

#include <functional>
#include <ostream>
#include <string>

#include "distributed/launcher.h"
#include "train/config.h"

namespace vitddp {

// "cpu" or "cuda:N" for this process. `visible` is the number of GPUs it can use;
// `describe_gpus` names them, for error lines only. Prints a note to `log` when it falls back to
// the CPU. Throws vitddp::Error on requests the machine cannot meet. Note [One GPU per rank].
std::string choose_device(const TrainConfig& config, const RankEnvironment& env, int visible,
                          const std::function<std::string()>& describe_gpus, std::ostream& log);

// The visible GPUs by index and name, "; "-separated, for error lines ("none" without any).
std::string describe_visible_gpus();

// The GPU a rank takes when nothing names one (no --gpus, no --device cuda:K): cuda:0 for a single
// process, a rank that sees one GPU, or a launcher that names no local rank; else the GPU of its
// local rank, which must be visible. Note [One GPU per rank].
int rank_gpu(const RankEnvironment& env, int visible, const std::function<std::string()>& describe_gpus);

}  // namespace vitddp
