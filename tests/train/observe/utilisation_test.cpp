// Model FLOP utilisation: the dense bf16 peaks by GPU name, and the arithmetic.
#include <gtest/gtest.h>

#include "train/observe/utilisation.h"

namespace vitddp {
namespace {

TEST(Utilisation, PeaksByGpuName) {
  EXPECT_EQ(dense_bf16_peak_tflops("0: NVIDIA H200 (139 GiB)"), 989.0);
  EXPECT_EQ(dense_bf16_peak_tflops("NVIDIA H100 80GB HBM3"), 989.0);
  EXPECT_EQ(dense_bf16_peak_tflops("NVIDIA H100 PCIe"), 756.0);
  EXPECT_EQ(dense_bf16_peak_tflops("NVIDIA A100-SXM4-80GB"), 312.0);
  EXPECT_EQ(dense_bf16_peak_tflops("NVIDIA GeForce RTX 4090"), 0.0);
  EXPECT_EQ(dense_bf16_peak_tflops(""), 0.0);
}

TEST(Utilisation, AchievedRateAndMfu) {
  // A bf16 row's rate on one H200: 2992 images/s at 92.3 GFLOP per trained image.
  Utilisation u = utilisation(2992.0, 92.3e9, "NVIDIA H200");
  EXPECT_NEAR(u.tflops_per_gpu, 276.2, 0.1);
  EXPECT_EQ(u.peak_tflops, 989.0);
  ASSERT_TRUE(u.mfu_pct.has_value());
  EXPECT_NEAR(*u.mfu_pct, 27.9, 0.05);
  Utilisation cpu = utilisation(100.0, 1e9, "");
  EXPECT_DOUBLE_EQ(cpu.tflops_per_gpu, 0.1);
  EXPECT_FALSE(cpu.mfu_pct.has_value());
}

}  // namespace
}  // namespace vitddp
