// `train bench loader [training flags]`: the data loader alone, built as a training run with the
// same flags builds it (--data, the model's image size, --batch-size, --seed, and the expert keys
// dataset-size and workers), without a model or a GPU: images and batches per second over --steps
// batches, timed after untimed-steps batches and those the workers had built ahead (timing starts
// at the first batch next() waited for): the rate a training step would have to beat for the
// loader to hold it up.
//
//   train bench loader --model vit_l_32 --set workers=8        # ViT-L/32's 224x224 synthetic images
//   train bench loader --model vit_l_32 --data train.safetensors --json
//
// One process, host memory (a GPU run also copies each batch into pinned memory and to the
// device, on a copy stream beside the step).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "models/vit/vit_config.h"
#include "train/config.h"

namespace vitddp::bench {

struct LoaderBenchResult {
  std::string model, data;
  int64_t channels = 0, image_size = 0, batch_size = 0, untimed_batches = 0;
  int64_t batches = 0, images = 0;  // timed, as the loader delivered them (an epoch's last batch may be short)
  int workers = 0;
  double seconds = 0;       // the timed batches' wall time
  double wait_seconds = 0;  // of it, time next() waited for a batch (all of it when the workers
                            // cannot keep up with a consumer that takes nothing)
  double images_per_second() const { return seconds > 0 ? images / seconds : 0.0; }
  double batches_per_second() const { return seconds > 0 ? batches / seconds : 0.0; }
  nlohmann::json to_json() const;
  std::string summary() const;  // one line
};

// Runs the loader of `config` for `model`: config.steps timed batches after the untimed ones.
LoaderBenchResult bench_loader(const TrainConfig& config, const VitConfig& model);

// The subcommand: parses the training flags after "bench loader", refuses those that do not
// apply (--gpus, --procs, --data gpu, and flags that only a training run acts on: --accumulate,
// --resume, --checkpoint-dir, --save, --op-breakdown, --trace) with one line, and prints the
// result (--json: one line).
int run_bench_loader(int argc, char** argv);

}  // namespace vitddp::bench
