// One optimizer step's constants. On a GPU the update kernels read them from device memory, so
// that an update captured in a CUDA graph (Note [A step as a CUDA graph] in
// train/graphed_step.cpp) still follows the learning-rate schedule: begin_step() writes them
// outside the graph.
#pragma once

namespace vitddp {

struct StepConstants {
  float lr = 0;            // SGD
  float step_size = 0;     // AdamW: lr / (1 - beta1^t)
  float inv_sqrt_bc2 = 1;  // AdamW: 1 / sqrt(1 - beta2^t)
  float decay = 1;         // AdamW: 1 - lr * weight_decay (where decay applies)
  float ema_keep = 0;      // model EMA: ema = ema_keep * ema + ema_take * w (0 and 1 at its first update)
  float ema_take = 1;
};

}  // namespace vitddp
