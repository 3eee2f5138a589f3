// The expert key early-bucket-mb (Note [Early buckets]) over 2 Gloo ranks: other caps for the buckets
// after the first change which bytes travel together, not the sums, so the weights are the plain
// run's bit for bit, with held buckets and updates in the next forward too; the start line gives
// the sizes made; resuming with another setting is named; bad lists are refused in one line.
#include <gtest/gtest.h>

#include "common/multiprocess.h"
#include "common/run_checks.h"
#include "common/train_process.h"

namespace vitddp {
namespace {

using testing::kTwoTinyGlooRanks;

TEST(EarlyBuckets, KeepTheWeights) {
  for (const std::string& mode :
       {std::string("--set early-bucket-mb=0.01,0.02"),
        std::string("--set early-bucket-mb=0.01,0.01 --set update=next-forward --set ready-order-share=0.5 --set held-buckets=1")}) {
    SCOPED_TRACE(mode);
    testing::expect_flags_keep_the_bytes(kTwoTinyGlooRanks + " --steps 4 --momentum 0.9", mode, "vitddp_early");
  }
}

// " (buckets 1-2: a, b MB)" on the start line, each at most its cap (printed to 0.001 MB), and more
// buckets than plain.
TEST(EarlyBuckets, TheStartLineGivesTheirSizes) {
  const testing::TrainOutcome plain = testing::run_train("", kTwoTinyGlooRanks + " --steps 1");
  ASSERT_EQ(plain.code, 0) << plain.out;
  const testing::TrainOutcome early =
      testing::run_train("", kTwoTinyGlooRanks + " --steps 1 --set early-bucket-mb=0.04,0.035");
  ASSERT_EQ(early.code, 0) << early.out;
  auto buckets = [](const std::string& out) { return testing::start_line_buckets(out, "0.05"); };
  EXPECT_GT(buckets(early.out), buckets(plain.out)) << early.out;
  const std::string prefix = " buckets of <= 0.05 MB (buckets 1-2: ";
  const size_t at = early.out.find(prefix);
  ASSERT_NE(at, std::string::npos) << early.out;
  size_t used = 0;
  const double first = std::stod(early.out.substr(at + prefix.size()), &used);
  const double second = std::stod(early.out.substr(at + prefix.size() + used + 2));
  // Caps above vit_tiny's largest parameter there (0.031 MB), below --bucket-mb's 0.05.
  EXPECT_GT(first, 0.0);
  EXPECT_LE(first, 0.0405) << early.out;
  EXPECT_GT(second, 0.0);
  EXPECT_LE(second, 0.0355) << early.out;
  EXPECT_EQ(plain.out.find("(bucket"), std::string::npos) << plain.out;
}

TEST(EarlyBuckets, ResumingWithAnotherSettingIsNamed) {
  const testing::TrainOutcome resumed =
      testing::resume_with_flags(kTwoTinyGlooRanks, "--set early-bucket-mb=0.01", "vitddp_early_resume");
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("with settings its run did not have (early-bucket-mb \"\" -> \"0.01\")"),
            std::string::npos)
      << resumed.out;
}

TEST(EarlyBuckets, BadValuesAreRefused) {
  for (const std::string& value : {std::string("0"), std::string("-1"), std::string("x"), std::string("1,,2"),
                                   std::string("1,"), std::string("2e6"), std::string("1MB"), std::string("0x10"),
                                   std::string("1e-9"), std::string("' 5'")}) {
    SCOPED_TRACE(value);
    testing::expect_refused_in_one_line(kTwoTinyGlooRanks + " --steps 1 --set early-bucket-mb=" + value,
                                        "early-bucket-mb must be sizes in MB in [1e-06, 1e6], comma-separated "
                                        "(\"10,25\"), got '" +
                                            (value == "' 5'" ? std::string(" 5") : value) + "'");
  }
  testing::expect_refused_in_one_line("--model vit_tiny --device cpu --batch-size 4 --steps 1 --set early-bucket-mb=1",
                                      "early-bucket-mb sizes DDP's gradient buckets: it needs data parallelism");
}

}  // namespace
}  // namespace vitddp
