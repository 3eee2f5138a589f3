#include "train/device_setup.h"

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include "framework/core/error.h"

#if VITDDP_WITH_CUDA
#include "framework/cuda/context.h"
#include "framework/cuda/stream.h"
#endif

namespace vitddp {
namespace {

#if VITDDP_WITH_CUDA
// gemm-cache-dir, or the user's cache folder; "" (with a note) when none can be made, and
// then each run chooses its GEMM algorithms afresh.
std::string gemm_cache_dir(const TrainConfig& config) {
  std::string dir = config.gemm_cache_dir;
  if (dir.empty()) {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    if (xdg && *xdg) dir = std::string(xdg) + "/vitddp";
    else if (home && *home) dir = std::string(home) + "/.cache/vitddp";
    else return "";
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::cerr << ("note: cannot make the GEMM algorithm cache folder " + dir + ": " + ec.message() +
                  "; GEMM algorithms are chosen afresh in this run\n")
              << std::flush;  // one write: every rank may say it at once
    return "";
  }
  return dir;
}
#endif

}  // namespace

void configure_device(const Device& device, const TrainConfig& config) {
  if (device.is_cpu()) {
    VITDDP_CHECK(config.precision == "fp32", "--precision ", config.precision,
                 " needs a GPU; the CPU backend trains in fp32");
    return;
  }
#if VITDDP_WITH_CUDA
  cuda::set_device(device.index);
  cuda::set_matmul_precision(config.precision == "tf32" ? cuda::MatmulPrecision::kTf32 : cuda::MatmulPrecision::kFp32);
  cuda::set_concurrent_weight_grads(config.concurrent_wgrad);
  cuda::set_gemm_autotune(config.gemm_autotune, config.gemm_autotune ? gemm_cache_dir(config) : "");
#endif
}

}  // namespace vitddp
