// Training learns: on a learnable synthetic task (class patterns + noise) a small ViT's loss
// falls well below chance within a few hundred CPU steps.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <sstream>

#include "train/trainer.h"

namespace vitddp {
namespace {

TEST(Training, LossFallsWellBelowChanceOnALearnableTask) {
  TrainConfig c;
  c.device = "cpu";
  c.model = "vit_tiny";
  c.data = "learnable";
  c.dataset_size = 4096;
  c.batch_size = 32;
  c.steps = 250;
  c.optimizer = "adamw";
  c.lr = 1e-3;
  c.weight_decay = 0.0;
  c.workers = 2;
  c.print_every = 0;
  c.seed = 3;
  std::ostringstream log;
  RunResult r = run_training(c, log);
  ASSERT_EQ(r.losses.size(), 250u);
  const double chance = std::log(10.0);
  EXPECT_NEAR(r.losses.front(), chance, 0.1);  // the zero-initialised head starts at chance
  double last = std::accumulate(r.losses.end() - 20, r.losses.end(), 0.0) / 20;
  EXPECT_LT(last, 0.25 * chance) << log.str();
}

}  // namespace
}  // namespace vitddp
