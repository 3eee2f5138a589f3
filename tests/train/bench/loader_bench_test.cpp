// `train bench loader`: the loader a training run's flags build, timed alone. The JSON line
// reports the batches asked for at the model's image shape and a positive rate; flags that do
// not apply (--data gpu, --gpus, --procs) are one line and exit 2; the library call times
// exactly the batches after the warm-up.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/train_process.h"
#include "train/bench/loader_bench.h"

namespace vitddp {
namespace {

using testing::TrainOutcome;

// The one line of `out` that starts with '{'.
nlohmann::json json_line(const std::string& out) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] == '{') return nlohmann::json::parse(line);
  return nlohmann::json();
}

TEST(LoaderBench, JsonLineForTheRunsLoader) {
  TrainOutcome o = testing::run_train(
      "", "bench loader --model vit_tiny --set image-size=48 --batch-size 8 --set workers=2 --steps 6 --set untimed-steps=1 --json");
  ASSERT_EQ(o.code, 0) << o.out;
  const nlohmann::json j = json_line(o.out);
  ASSERT_TRUE(j.is_object()) << o.out;
  EXPECT_EQ(j.at("bench"), "loader");
  EXPECT_EQ(j.at("model"), "vit_tiny");
  EXPECT_EQ(j.at("image_shape"), nlohmann::json::array({3, 48, 48}));
  EXPECT_EQ(j.at("batch_size"), 8);
  EXPECT_EQ(j.at("workers"), 2);
  EXPECT_EQ(j.at("batches"), 6);
  EXPECT_GE(j.at("untimed_batches"), 1);
  EXPECT_GT(j.at("images_per_s").get<double>(), 0.0);
  EXPECT_NEAR(j.at("images_per_s").get<double>(), 8 * j.at("batches_per_s").get<double>(), 1e-6);
}

// An epoch of 10 images in batches of 8 gives batches of 8 and 2: the images are counted as
// delivered, not as batches x batch size.
TEST(LoaderBench, CountsTheImagesOfShortBatches) {
  TrainOutcome o = testing::run_train(
      "", "bench loader --model vit_tiny --set dataset-size=10 --batch-size 8 --set workers=1 --steps 4 "
          "--set untimed-steps=0 --json");
  ASSERT_EQ(o.code, 0) << o.out;
  const nlohmann::json j = json_line(o.out);
  EXPECT_EQ(j.at("batches"), 4);
  EXPECT_EQ(j.at("images"), 20);
  EXPECT_NEAR(j.at("images_per_s").get<double>(), 5 * j.at("batches_per_s").get<double>(), 1e-6);
}

TEST(LoaderBench, FlagsThatDoNotApplyAreOneLineAndExit2) {
  struct Case {
    const char* args;
    const char* says;
  };
  for (const Case& c : {Case{"bench loader --data gpu", "--data gpu makes the batches on the GPU"},
                        Case{"bench loader --procs 2", "--gpus and --procs do not apply"},
                        Case{"bench loader --accumulate 2", "with --accumulate K a step takes K batches"},
                        Case{"bench loader --save w.safetensors", "act on training"},
                        Case{"bench loader --set workers=2 --steps 0", "--steps"}}) {
    TrainOutcome o = testing::run_train("", c.args);
    EXPECT_EQ(o.code, 2) << c.args << "\n" << o.out;
    EXPECT_NE(o.out.find(c.says), std::string::npos) << c.args << "\n" << o.out;
  }
}

// Timing starts at the first batch next() waits for (here every one: built on this thread).
TEST(LoaderBench, TimesTheBatchesAfterTheUntimedOnes) {
  TrainConfig config;
  config.model = "vit_tiny";
  config.batch_size = 4;
  config.workers = 0;  // built on this thread: every timed batch is waited for
  config.untimed_steps = 2;
  config.steps = 5;
  const VitConfig model = vit_config_by_name("vit_tiny");
  bench::LoaderBenchResult r = bench::bench_loader(config, model);
  EXPECT_EQ(r.batches, 5);
  EXPECT_EQ(r.untimed_batches, 2);
  EXPECT_GT(r.seconds, 0.0);
  EXPECT_GT(r.wait_seconds, 0.0);
  EXPECT_LE(r.wait_seconds, r.seconds);
  EXPECT_EQ(r.images, 20);
  EXPECT_NE(r.summary().find("5 batches of 20 images after 2 untimed"), std::string::npos) << r.summary();
}

}  // namespace
}  // namespace vitddp
