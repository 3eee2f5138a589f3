// Model FLOP utilisation (MFU): the model's training FLOPs per second on one GPU over that
// GPU's peak. The peak is the data sheet's dense bf16 tensor-core rate, one yardstick for every
// precision (as docs/performance.md uses it): an fp32 run's MFU says how far it is from what
// the GPU could do in bf16, not from its fp32 ceiling.
#pragma once

#include <optional>
#include <string>

namespace vitddp {

// Dense bf16 tensor-core TFLOP/s for a GPU by its name ("NVIDIA H200", "NVIDIA H100 80GB
// HBM3", ...); 0 when the name is not one we know.
double dense_bf16_peak_tflops(const std::string& gpu_name);

struct Utilisation {
  double tflops_per_gpu = 0;      // achieved: images/s per GPU x FLOPs per trained image
  double peak_tflops = 0;         // 0: unknown GPU (or the CPU)
  std::optional<double> mfu_pct;  // 100 x achieved / peak, when the peak is known
};

Utilisation utilisation(double images_per_s_per_gpu, double flops_per_image, const std::string& gpu_name);

}  // namespace vitddp
