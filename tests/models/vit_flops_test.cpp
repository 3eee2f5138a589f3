// The FLOP count behind model FLOP utilisation: per image, twice the multiply-adds of the
// matrix products. Half of it, in GMAC, is the figure torchvision publishes as "GFLOPS" for
// each named ViT (its counter counts one multiply-add as one), so the two must agree.
#include <gtest/gtest.h>

#include "models/vit/vit_config.h"

namespace vitddp {
namespace {

TEST(VitFlops, HalfTheForwardFlopsAreTorchvisionsPublishedCounts) {
  const std::pair<const char*, double> published[] = {
      {"vit_b_16", 17.56}, {"vit_b_32", 4.41}, {"vit_l_16", 61.55}, {"vit_l_32", 15.38}, {"vit_h_14", 167.29}};
  for (const auto& [name, gmac] : published) {
    const VitConfig c = vit_config_by_name(name);
    EXPECT_NEAR(c.forward_flops_per_image() / 2e9, gmac, gmac * 1e-3) << name;
  }
}

TEST(VitFlops, TrainingIsThreeForwardsAndGrowsWithTheParts) {
  VitConfig c = vit_config_by_name("vit_l_32");
  EXPECT_DOUBLE_EQ(c.training_flops_per_image(), 3 * c.forward_flops_per_image());
  EXPECT_NEAR(c.forward_flops_per_image(), 30.8e9, 0.1e9);  // the forward's count docs/performance.md uses
  // One more layer adds its projections and attention: 2 x tokens x (4 d^2 + 2 d mlp + 2 tokens d).
  const double before = c.forward_flops_per_image();
  c.num_layers += 1;
  const double tokens = 50, d = 1024, mlp = 4096;
  EXPECT_DOUBLE_EQ(c.forward_flops_per_image() - before, 2 * tokens * (4 * d * d + 2 * d * mlp + 2 * tokens * d));
}

}  // namespace
}  // namespace vitddp
