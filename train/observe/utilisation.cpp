#include "train/observe/utilisation.h"

namespace vitddp {

double dense_bf16_peak_tflops(const std::string& gpu_name) {
  auto has = [&](const char* part) { return gpu_name.find(part) != std::string::npos; };
  if (has("H200")) return has("NVL") ? 835.0 : 989.0;
  if (has("H100")) return has("PCIe") ? 756.0 : has("NVL") ? 835.0 : 989.0;  // SXM: 989
  if (has("A100")) return 312.0;
  return 0.0;
}

Utilisation utilisation(double images_per_s_per_gpu, double flops_per_image, const std::string& gpu_name) {
  Utilisation u;
  u.tflops_per_gpu = images_per_s_per_gpu * flops_per_image / 1e12;
  u.peak_tflops = dense_bf16_peak_tflops(gpu_name);
  if (u.peak_tflops > 0) u.mfu_pct = 100.0 * u.tflops_per_gpu / u.peak_tflops;
  return u;
}

}  // namespace vitddp
