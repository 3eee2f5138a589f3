// A training process's device settings from its configuration: matmul precision, weight
// gradients beside input gradients, GEMM autotuning and its algorithm cache.
#pragma once

#include "framework/core/dtype.h"
#include "train/config.h"

namespace vitddp {

// Makes `device` current and applies the run's flags to it; on the CPU, refuses other precisions
// than fp32.
void configure_device(const Device& device, const TrainConfig& config);

}  // namespace vitddp
