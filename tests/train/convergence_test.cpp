// Convergence on real images in CI: scikit-learn's handwritten digits, written as JPEG folders
// at test time (scripts/make_digits_dataset.py), learnt by a small ViT on 2 Gloo ranks with the
// recipe of configs/digits_vit.json to at least 95% top-1 on the 360 held-out images (its EMA).
// docs/performance.md sets it beside torchvision's run of the same recipe.
#include <gtest/gtest.h>

#include "common/multiprocess.h"
#include "common/parity_python.h"
#include "common/train_process.h"

namespace vitddp {
namespace {

TEST(Convergence, ASmallVitLearnsTheDigitsOnTwoGlooRanks) {
  VITDDP_REQUIRE_PARITY_PYTHON();
  testing::TempFolder dir("vitddp_digits");
  const std::string made = testing::make_digits_dataset(dir.path());
  ASSERT_EQ(made.rfind("OK\n", 0), 0u) << made;
  const testing::TrainOutcome o = testing::run_train(
      "", "--config " + std::string(VITDDP_SOURCE_DIR) + "/configs/digits_vit.json --procs 2 --data " + dir.path() +
              "/train --eval-data " + dir.path() + "/val --set eval-every=700 --json",
      /*use_gpus=*/false, 900);
  ASSERT_EQ(o.code, 0) << o.out;
  const nlohmann::json eval = o.json()["eval"];
  EXPECT_EQ(eval["samples"], 360) << o.out;
  EXPECT_EQ(eval["on_ema"], true) << o.out;
  EXPECT_GE(eval["top1"].get<double>(), 0.95) << o.out;
  std::cout << "digits: top-1 " << eval["top1"] << ", top-5 " << eval["top5"] << " after " << eval["after_step"]
            << " steps in " << o.seconds << " s\n";
}

}  // namespace
}  // namespace vitddp
