// DDP equivalence harness shared by the Gloo (CPU) and NCCL (GPU) tests: ranks in forked
// processes train a tiny ViT for a few steps on their slices of a fixed global batch and write
// their weights after each step; the parent compares ranks with each other and with one
// process trained on the whole batch. The parent never touches CUDA (it would not survive
// fork); each child picks its own device.
#pragma once

#include <string>

#include "framework/core/dtype.h"
#include "train/config.h"

namespace vitddp::testing {

// Runs `world` ranks on `device_type` (cuda: rank r on cuda:r) with `config`'s DDP settings and
// checks: identical weights on every rank after every step, and a relative error against the
// one-process reference no larger than `tolerance` (negative: skip that comparison). Reports
// failures through gtest.
void check_ddp_equivalence(int world, DeviceType device_type, const TrainConfig& config, double tolerance,
                           const std::string& what);

// The layouts every backend must get right: gradients as bucket views or copied, many small
// buckets or one; then the fp16 and bf16 hooks (within their rounding).
void check_bucket_layouts_and_hooks(int world, DeviceType device_type);

// GPUs visible to a child process, counted without initialising CUDA in this one.
int gpus_without_cuda_init();

}  // namespace vitddp::testing
