// decide_cuda_loading: eager kernel loading exactly when a copy-engine NCCL transport is on and
// the user left CUDA_MODULE_LOADING alone; a warning when the user asked for lazy loading.
#include "distributed/cuda_loading.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace vitddp {
namespace {

CudaLoadingDecision decide(const std::map<std::string, std::string>& env) {
  return decide_cuda_loading([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(CudaLoading, NothingChangesWithoutCopyEngines) {
  for (const auto& env : {std::map<std::string, std::string>{},
                          {{"NCCL_SHM_USE_CUDA_MEMCPY", "0"}},
                          {{"NCCL_P2P_DISABLE", "1"}, {"CUDA_MODULE_LOADING", "LAZY"}}}) {
    const CudaLoadingDecision d = decide(env);
    EXPECT_FALSE(d.set_eager);
    EXPECT_TRUE(d.message.empty()) << d.message;
  }
}

TEST(CudaLoading, CopyEnginesLoadEveryKernelAtStart) {
  for (const char* setting : {"NCCL_SHM_USE_CUDA_MEMCPY", "NCCL_P2P_USE_CUDA_MEMCPY"}) {
    const CudaLoadingDecision d = decide({{setting, "1"}});
    EXPECT_TRUE(d.set_eager) << setting;
    EXPECT_NE(d.message.find(std::string(setting) + "=1"), std::string::npos) << d.message;
    EXPECT_NE(d.message.find("CUDA_MODULE_LOADING=EAGER"), std::string::npos) << d.message;
  }
}

TEST(CudaLoading, AnExplicitChoiceIsKeptAndLazyIsWarnedAbout) {
  const CudaLoadingDecision eager = decide({{"NCCL_SHM_USE_CUDA_MEMCPY", "1"}, {"CUDA_MODULE_LOADING", "EAGER"}});
  EXPECT_FALSE(eager.set_eager);
  EXPECT_TRUE(eager.message.empty());
  const CudaLoadingDecision lazy = decide({{"NCCL_SHM_USE_CUDA_MEMCPY", "1"}, {"CUDA_MODULE_LOADING", "LAZY"}});
  EXPECT_FALSE(lazy.set_eager);
  EXPECT_EQ(lazy.message.rfind("warning: CUDA_MODULE_LOADING=LAZY", 0), 0u) << lazy.message;
}

}  // namespace
}  // namespace vitddp
