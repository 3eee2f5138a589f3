// A training process's device settings from its flags (matmul precision, GEMM planning, launch
// window, the GEMM algorithm cache) and --sm-carveout's scope.
#pragma once

#include <cstdint>

#include "framework/core/dtype.h"
#include "train/config.h"

namespace vitddp {

// Makes `device` current and applies the run's flags to it; on the CPU, refuses other precisions
// than fp32.
void configure_device(const Device& device, const TrainConfig& config);

// --sm-carveout for a scope (the backward pass, while buckets are all-reduced beside it).
class GemmSmCarveout {
 public:
  GemmSmCarveout(Device device, int64_t sms);
  ~GemmSmCarveout();
  GemmSmCarveout(const GemmSmCarveout&) = delete;
  GemmSmCarveout& operator=(const GemmSmCarveout&) = delete;

 private:
  bool active_;
};

}  // namespace vitddp
