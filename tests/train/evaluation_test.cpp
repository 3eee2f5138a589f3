// Evaluation through `train` (CPU): --eval-data counts every sample exactly once whatever the
// number of ranks, on a set of 101 images that neither 2 nor 3 divides, and its counts are
// torchvision's for the same saved weights (tests/python/eval_parity.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "common/multiprocess.h"
#include "common/parity_python.h"
#include "common/train_process.h"

namespace vitddp {
namespace {

namespace fs = std::filesystem;

// The first ten images of each digit of the held-out set, and one more of digit 0: 101.
void make_eval_folder(const fs::path& val, const fs::path& out) {
  for (int digit = 0; digit < 10; ++digit) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(val / std::to_string(digit))) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    fs::create_directories(out / std::to_string(digit));
    const size_t take = digit == 0 ? 11 : 10;
    ASSERT_GE(files.size(), take);
    for (size_t i = 0; i < take; ++i) fs::copy_file(files[i], out / std::to_string(digit) / files[i].filename());
  }
}

TEST(EvaluationCli, CountsAreTheSameOnOneTwoAndThreeRanksAndTorchvisions) {
  VITDDP_REQUIRE_PARITY_PYTHON();
  testing::TempFolder dir("vitddp_eval");
  const std::string made = testing::make_digits_dataset(dir.path());
  ASSERT_EQ(made.rfind("OK\n", 0), 0u) << made;
  make_eval_folder(dir / "val", dir / "eval101");
  const std::string model = "--model vit_tiny --set layers=4 --set hidden-dim=128 --set mlp-dim=256 --print-every 0 --data " +
                            dir.path() + "/train --eval-data " + dir.path() + "/eval101";
  // Weights that know something, so that the counts are neither 0 nor all.
  const std::string weights = (dir / "weights.safetensors").string();
  const testing::TrainOutcome trained = testing::run_train(
      "", model + " --steps 150 --batch-size 32 --optimizer adamw --lr 0.002 --warmup-steps 20 --lr-schedule cosine "
              "--set crop-min-scale=0.35 --set random-flip=false --json --save " + weights, false, 300);
  ASSERT_EQ(trained.code, 0) << trained.out;
  // The same weights evaluated on 1, 2 and 3 ranks: one step at --lr 0 leaves them as they are.
  nlohmann::json first;
  for (int procs : {1, 2, 3}) {
    const testing::TrainOutcome o = testing::run_train(
        "", model + " --procs " + std::to_string(procs) + " --steps 1 --batch-size 8 --lr 0 --init-from " + weights +
                " --json",
        false, 300);
    ASSERT_EQ(o.code, 0) << o.out;
    const nlohmann::json eval = o.json()["eval"];
    EXPECT_EQ(eval["samples"], 101) << procs << " ranks: " << o.out;
    if (procs == 1) {
      first = eval;
      EXPECT_GT(eval["correct1"].get<int>(), 20) << o.out;
      EXPECT_LT(eval["correct1"].get<int>(), 101) << o.out;
      continue;
    }
    EXPECT_EQ(eval["correct1"], first["correct1"]) << procs << " ranks: " << o.out;
    EXPECT_EQ(eval["correct5"], first["correct5"]) << procs << " ranks: " << o.out;
    EXPECT_NEAR(eval["loss"].get<double>(), first["loss"].get<double>(), 1e-6 * first["loss"].get<double>());
  }
  const std::string out = testing::run_parity_script(
      "eval_parity.py", weights + " " + dir.path() + "/eval101 --dims 32,8,4,4,128,256,10 --correct1 " +
                            first["correct1"].dump() + " --correct5 " + first["correct5"].dump() + " --samples " +
                            first["samples"].dump() + " --loss " + first["loss"].dump());
  std::cout << out;
  EXPECT_EQ(out.rfind("OK\n", 0), 0u) << out;
}

}  // namespace
}  // namespace vitddp
