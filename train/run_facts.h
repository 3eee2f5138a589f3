// What a training process detects about its run before choosing its settings
// (train/auto_settings.h): its device, the ranks and whether its GPUs reach each other directly.
#pragma once

#include "distributed/launcher.h"
#include "framework/core/dtype.h"
#include "train/auto_settings.h"

namespace vitddp {

// Peer access is checked between GPUs 0 .. world - 1 of this machine when it runs every rank and
// shows them all (our launcher, torchrun); NCCL_P2P_DISABLE=1 means none. Elsewhere it is taken
// to be there, which keeps the choices NCCL's.
RunFacts detect_run_facts(const RankEnvironment& env, const Device& device);

}  // namespace vitddp
