// What one process's training run is made of, set up in order: the device and the settings the
// program chooses, the model and its parameter arena, the optimizer and its non-finite check,
// data parallelism, the state a resume restores, and the data. The trainer (train/trainer.h)
// runs it; checkpoints (train/checkpoint/run_state.h) save and restore it.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "data/sampler.h"
#include "distributed/ddp.h"
#include "distributed/launcher.h"
#include "framework/nn/param_arena.h"
#include "framework/optim/grad_clip.h"
#include "framework/optim/lr_schedule.h"
#include "framework/optim/nonfinite.h"
#include "framework/optim/optimizer.h"
#include "models/vit/vit.h"
#include "train/auto_settings.h"
#include "train/batch_source.h"
#include "train/config.h"

namespace vitddp {

struct TrainingRun {
  TrainConfig config;                   // the user's settings with the program's choices
  std::vector<ChosenSetting> chosen;    // what it chose, and why
  RankEnvironment env;
  int world = 1;
  std::string device_name;              // "cpu" or "cuda:N"
  Device device;
  VitConfig model_config;
  DType compute_dtype = DType::kF32;    // bf16: mixed precision with f32 master weights in the arena
  std::unique_ptr<VisionTransformer> model;
  std::unique_ptr<ParamArena> arena;
  std::unique_ptr<Optimizer> optimizer;  // with the decay mask, the clip and the EMA the recipe asks for
  std::unique_ptr<LrSchedule> schedule;  // every step's learning rate
  std::unique_ptr<GradNormClip> clip;    // --clip-grad-norm; null without
  std::unique_ptr<NonfiniteCheck> nonfinite;
  // Note [The non-finite scan in the update] (framework/optim/optimizer.h): under --nonfinite
  // stop the update's own pass finds a bad step; under skip a scan runs before the update.
  bool scan_in_update = true;
  std::unique_ptr<DistributedDataParallel> ddp;  // null without data parallelism
  int64_t start_step = 0;               // the first step to train (a resumed run's checkpoint step)
  nlohmann::json recovery;              // a resumed run's: restart, restored_from, step, restore_seconds, ...
  std::unique_ptr<Dataset> dataset;     // null for --data gpu
  std::shared_ptr<const SampleOrder> order;  // this rank's order of the dataset
  std::vector<std::string> classes;     // an image folder's class names (labels for --eval-data)
  std::unique_ptr<BatchSource> batches;
};

// Resolves the "auto" device and model choices; prints a note to `log` when it falls back to the
// CPU. Throws vitddp::Error on requests the machine cannot meet (naming what it has).
struct ResolvedRun {
  std::string device;  // "cpu" or "cuda:N"
  VitConfig model;
};
ResolvedRun resolve_run(const TrainConfig& config, const RankEnvironment& env, std::ostream& log);

// What data parallelism is given of `config` for this rank.
DdpOptions ddp_options(const TrainConfig& config, const RankEnvironment& env);

// Sets the run up for this process; `out` is rank 0's log (others pass a null stream). Resumes
// from the newest checkpoint under --resume. Throws vitddp::Error on bad input.
TrainingRun set_up_run(const TrainConfig& config, const RankEnvironment& env, std::ostream& out);

}  // namespace vitddp
