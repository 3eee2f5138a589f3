// How many GPUs this process can use, in every build: 0 without CUDA support, a driver or a
// device (never throws). See framework/cuda/device.h for names and details.
#pragma once

namespace vitddp {

int visible_gpu_count();

}  // namespace vitddp
