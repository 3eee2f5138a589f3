// The GEMM autotuner keeps its choices (Note [Choosing a GEMM algorithm]): a product at a
// new shape, tuned with a cache folder, leaves a file for this GPU (and its lock) from which
// a later run reads the choice back; the product's values are those of the CPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/gpu.h"
#include "common/multiprocess.h"
#include "common/test_utils.h"
#include "framework/io/algorithm_cache.h"
#include "framework/ops/ops.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/context.h"
#endif

namespace vitddp {
namespace {

namespace fs = std::filesystem;

TEST(GemmAutotuneGpu, ChoicesAreKeptInAFilePerGpu) {
  VITDDP_REQUIRE_GPU();
#if VITDDP_WITH_CUDA
  testing::TempFolder dir("vitddp_gemm_cache");
  cuda::set_gemm_autotune(true, dir.path());
  Generator gen(31);
  Tensor x = testing::random_tensor({8, 50, 224}, gen, DType::kF32);  // a shape no other test uses
  Tensor w = testing::random_tensor({352, 224}, gen, DType::kF32);
  Tensor b = testing::random_tensor({352}, gen, DType::kF32);
  Tensor gpu = linear(x.to(Device::cuda(0)), w.to(Device::cuda(0)), b.to(Device::cuda(0)));
  Tensor cpu = linear(x, w, b);
  cuda::set_gemm_autotune(false);
  EXPECT_LE(testing::relative_error(gpu.to(Device::cpu()), cpu), 1e-5);
  // One choices file for cuda:0, and beside it the lock that serialises writers.
  std::vector<fs::path> files;
  std::vector<fs::path> locks;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    (e.path().extension() == ".lock" ? locks : files).push_back(e.path());
  }
  ASSERT_EQ(files.size(), 1u) << "one file for cuda:0";
  ASSERT_EQ(locks.size(), 1u);
  EXPECT_EQ(locks[0].string(), files[0].string() + ".lock");
  EXPECT_NE(files[0].filename().string().find("cuda0"), std::string::npos) << files[0];
  // Read back under the context the file names: the entries are there.
  std::string context;
  {
    std::ifstream in(files[0]);
    nlohmann::json doc = nlohmann::json::parse(in);
    context = doc.at("context").get<std::string>();
  }
  AlgorithmCache kept(context);
  EXPECT_EQ(kept.load(files[0].string()), "");
  EXPECT_GE(kept.size(), 1u);
#endif
}

}  // namespace
}  // namespace vitddp
