// Checks on what `train` runs leave behind (weights files, their printed summaries), shared by
// the end-to-end tests that compare a setting against the plain run.
#pragma once

#include <string>

#include "common/train_process.h"

namespace vitddp::testing {

// Two Gloo ranks training vit_tiny in several small buckets on a fixed dataset size, so the
// sampler's order does not depend on --steps: the DDP update settings' CPU comparisons.
inline const std::string kTwoTinyGlooRanks =
    "--procs 2 --model vit_tiny --batch-size 4 --set workers=1 --set dataset-size=64 --bucket-mb 0.05 "
    "--print-every 0";

// Two GPUs over NCCL training vit_tiny on batches made on the GPU, its products chosen by
// cuBLASLt's heuristic, not by timing (the same in every run), with the plain update over NCCL
// whatever the program would choose for two GPUs (a later --set overrides it): the GPU
// comparisons. No --steps (expect_checkpoints_resume_exactly sets its own).
inline const std::string kTwoTinyGpuRanks =
    "--gpus 2 --set timeout=60 --model vit_tiny --data gpu --batch-size 32 --print-every 0 "
    "--set gemm-autotune=false --set update=after-backward --set transport=nccl";

// The whole file (empty when it cannot be read).
std::string file_bytes(const std::string& path);
// The largest difference between the tensors of two weight files (EXPECTs the same names and sizes).
double worst_weight_difference(const std::string& a_path, const std::string& b_path);
// N of the start line's "N buckets of <= 0.05 MB" (`cap` = "0.05"), -1 without it.
int start_line_buckets(const std::string& out, const std::string& cap);
// N of the "updates in backward: N bucket update(s) issued beside backward" line, -1 without it.
int updates_issued_beside_backward(const std::string& out);

// Runs `train args` (CPU ranks): it must stop before training with exit 2 and one line of output
// that contains `message`.
void expect_refused_in_one_line(const std::string& args, const std::string& message);

// Trains `args` plainly and with `flags` (CPU ranks; `args` must not set --save), in a temporary
// folder named `folder`: both must finish, save the same weights byte for byte, and report the
// same loss in every step (--json). Returns the run with `flags`.
TrainOutcome expect_flags_keep_the_bytes(const std::string& args, const std::string& flags, const std::string& folder);

// Trains `args` (which must not set --steps, --save or checkpoints) for 2 steps with a checkpoint
// at step 2, in a temporary folder named `folder`, then resumes it to step 3 with `flags` added:
// both must finish. Returns the resumed run (its warning names the settings that changed).
TrainOutcome resume_with_flags(const std::string& args, const std::string& flags, const std::string& folder);

// Trains `args` (which must not set --steps, --save or checkpoints) for 6 steps straight, then
// for 4 with checkpoints every 2 and resumed to 6, in a temporary folder named `folder`: the
// resumed run must say it resumed at step 4 and save the straight run's weights, byte for byte.
// `use_gpus`: as run_train's.
void expect_checkpoints_resume_exactly(const std::string& args, const std::string& folder, bool use_gpus = false);

// Trains `args` for `steps` straight, and for `first` steps with a checkpoint there resumed with
// --steps `steps`, in a temporary folder named `folder`: the resumed run must start at step
// first + 1, warn of no changed setting, and save the straight run's weights byte for byte.
// Returns the resumed run (with its --json line). `use_gpus`: as run_train's.
TrainOutcome expect_resume_with_more_steps(const std::string& args, int first, int steps, const std::string& folder,
                                           bool use_gpus = false);

// Note [Chosen settings]: trains `args` (GPU runs, under the environment `env`) as the program
// chooses, then with `pin` (the key as it would be otherwise), in a temporary folder named
// `folder`: the first run's settings hold `key` = `chosen`, and both save the same weights.
// Returns the first run.
TrainOutcome expect_chosen_setting_keeps_the_weights(const std::string& env, const std::string& args,
                                                     const std::string& key, const std::string& chosen,
                                                     const std::string& pin, const std::string& folder);

// Trains `args` plainly, with `flags` eagerly (--cuda-graph=false) and with `flags` plus
// --cuda-graph (whose JSON must then count `replays` replayed steps), in a temporary folder named
// `folder`: all three must finish and save the same weights. Returns the two runs with `flags`,
// each with its --json line. GPU runs.
struct FlagRuns {
  TrainOutcome eager;
  TrainOutcome graphed;
};
FlagRuns expect_flags_keep_the_weights(const std::string& args, const std::string& flags, const std::string& folder,
                                       int replays);

}  // namespace vitddp::testing
