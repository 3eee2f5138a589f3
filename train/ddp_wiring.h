// The one place where a model's parameters meet the distributed machinery: the process
// group, the check that every rank built the same model, the broadcast of rank 0's weights,
// the reducer and the gradient-ready hooks that feed it.
#pragma once

#include <memory>

#include "distributed/launcher.h"
#include "distributed/process_group.h"
#include "distributed/reducer.h"
#include "framework/nn/param_arena.h"
#include "train/config.h"

namespace vitddp {

struct Ddp {
  std::unique_ptr<ProcessGroup> group;
  std::unique_ptr<Reducer> reducer;
};

// For world size 1 without ddp returns an empty Ddp (no group, no reducer); with --ddp a group of
// one process and the reducer.
Ddp setup_ddp(const TrainConfig& config, const RankEnvironment& env, Device device, ParamArena& arena);

}  // namespace vitddp
