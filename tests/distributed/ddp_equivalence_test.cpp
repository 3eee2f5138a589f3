// DDP over Gloo across real processes: after K steps the parameters equal those of one process
// trained on the concatenated batch (within 1e-5 relative, f32), for every combination of
// gradient-as-bucket-view and bucket size; and they are bit-identical across ranks after every
// step, for every hook (fp16/bf16 within their rounding of the reference).
#include <gtest/gtest.h>

#include "common/ddp_harness.h"
#include "common/multiprocess.h"
#include "framework/nn/param_arena.h"
#include "models/vit/vit.h"
#include "framework/optim/optimizer.h"
#include "distributed/ddp.h"
#include "train/run_setup.h"

namespace vitddp {
namespace {

using testing::check_ddp_equivalence;

TEST(DdpGloo, TwoRanksEqualOneProcessForEveryBucketLayoutAndHook) {
  testing::check_bucket_layouts_and_hooks(2, DeviceType::kCPU);
}

TEST(DdpGloo, FourRanksEqualOneProcess) {
  TrainConfig config;
  config.bucket_mb = 0.05;
  check_ddp_equivalence(4, DeviceType::kCPU, config, 1e-5, "4 ranks");
}

TEST(DdpGloo, GradientAccumulationEqualsOneProcessOnAllMicroBatches) {
  TrainConfig config;
  config.bucket_mb = 0.05;
  config.accumulate = 3;
  check_ddp_equivalence(2, DeviceType::kCPU, config, 1e-5, "accumulate 3");
}

TEST(DdpGloo, PowerSgdRanksStayIdentical) {
  for (int64_t rank : {1, 2}) {
    TrainConfig config;
    config.bucket_mb = 0.05;
    config.hook = "powersgd";
    config.powersgd_rank = rank;
    config.powersgd_start_iter = 1;
    check_ddp_equivalence(2, DeviceType::kCPU, config, -1, "powersgd rank " + std::to_string(rank));
  }
}

}  // namespace
}  // namespace vitddp

namespace vitddp {
namespace {

// Ranks that build different models are stopped by the start-up check, on every rank.
TEST(DdpGloo, RanksWithDifferentModelsFailClearly) {
  testing::TempFolder folder("vitddp_ddp_mismatch");
  std::vector<int> codes = testing::run_in_processes(
      2,
      [&](int rank) {
        VitConfig config = vit_config_by_name("vit_tiny");
        config.hidden_dim = rank == 0 ? 64 : 32;
        VisionTransformer model(config, 1);
        NamedTensors params = model.named_parameters();
        ParamArena arena(params, Device::cpu());
        RankEnvironment env;
        env.distributed = true;
        env.rank = env.local_rank = rank;
        env.world_size = 2;
        env.rendezvous = folder.path();
        TrainConfig train;
        train.timeout = 20;
        auto sgd = make_sgd(arena, SgdConfig{0.1, 0.0, 0.0});
        try {
          DistributedDataParallel ddp(arena, model, *sgd, Tensor(), ddp_options(train, env));
        } catch (const Error& e) {
          return std::string(e.what()).find("built a different model") != std::string::npos ? 0 : 1;
        }
        return 2;  // no error: the check missed it
      },
      std::chrono::seconds(60));
  EXPECT_EQ(codes, (std::vector<int>{0, 0})) << testing::describe_exit_codes(codes);
}

}  // namespace
}  // namespace vitddp
