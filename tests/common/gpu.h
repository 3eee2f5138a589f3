// GPU test helpers: skip without a GPU, and compare an op on the GPU with the CPU reference.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "common/test_utils.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/device.h"
#endif

namespace vitddp::testing {

inline bool gpu_available() {
#if VITDDP_WITH_CUDA
  return cuda::visible_device_count() > 0;
#else
  return false;
#endif
}

#define VITDDP_REQUIRE_GPU()                                          \
  do {                                                                \
    if (!::vitddp::testing::gpu_available()) GTEST_SKIP() << "no GPU visible"; \
  } while (0)

// Runs body(rank) on `world` threads, thread r with cuda:r current (collective tests run their
// ranks as threads: CUDA does not survive a fork); returns each rank's error text, "" when its
// body finished.
std::vector<std::string> run_on_gpu_threads(int world, const std::function<void(int rank)>& body);

// Runs `fn` forward and backward (with a random output weighting) on CPU f32 inputs and on
// copies of them on cuda:0 converted to `gpu_dtype`, and checks outputs and every input
// gradient agree within `rtol` (norm-wise relative error). Inputs that require grad get grads.
::testing::AssertionResult cuda_matches_cpu(const TensorFn& fn, const std::vector<Tensor>& cpu_inputs, double rtol,
                                            DType gpu_dtype = DType::kF32);

}  // namespace vitddp::testing
