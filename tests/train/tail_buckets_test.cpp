// The expert key tail-bucket-mb (Note [The tail buckets]) over 2 Gloo ranks: cutting the last bucket's
// worth of gradients into small buckets changes which bytes travel together, not the sums, so
// the weights are the plain run's bit for bit, also with updates in the next forward; the start
// line says so; bad values are refused.
#include <gtest/gtest.h>

#include "common/multiprocess.h"
#include "common/run_checks.h"
#include "common/train_process.h"

namespace vitddp {
namespace {

using testing::kTwoTinyGlooRanks;

TEST(TailBuckets, KeepTheWeights) {
  for (const std::string& mode : {std::string("--set tail-bucket-mb=0.01"),
                                  std::string("--set tail-bucket-mb=0.01 --set update=next-forward --set ready-order-share=0.5")}) {
    SCOPED_TRACE(mode);
    testing::expect_flags_keep_the_bytes(kTwoTinyGlooRanks + " --steps 4 --momentum 0.9", mode,
                                         "vitddp_tail");
  }
}

TEST(TailBuckets, TheStartLineCountsThem) {
  const testing::TrainOutcome plain = testing::run_train("", kTwoTinyGlooRanks + " --steps 1");
  ASSERT_EQ(plain.code, 0) << plain.out;
  const testing::TrainOutcome tail =
      testing::run_train("", kTwoTinyGlooRanks + " --steps 1 --set tail-bucket-mb=0.01");
  ASSERT_EQ(tail.code, 0) << tail.out;
  auto buckets = [](const std::string& out) { return testing::start_line_buckets(out, "0.05"); };
  EXPECT_GT(buckets(plain.out), 0) << plain.out;
  // The last 0.05 MB (a bucket's worth) in 0.01 MB buckets: more of them.
  EXPECT_GT(buckets(tail.out), buckets(plain.out)) << tail.out;
  // "(the last K of <= 0.01 MB)": K from the reducer's buckets, here every one past the last
  // plain bucket.
  const size_t at = tail.out.find(" buckets of <= 0.05 MB (the last ");
  ASSERT_NE(at, std::string::npos) << tail.out;
  const size_t k_begin = at + std::string(" buckets of <= 0.05 MB (the last ").size();
  const int k = std::stoi(tail.out.substr(k_begin));
  EXPECT_GE(k, 2);
  EXPECT_LT(k, buckets(tail.out));
  EXPECT_NE(tail.out.find(std::to_string(k) + " of <= 0.01 MB), hook ", k_begin), std::string::npos) << tail.out;
}

// A checkpoint restores the buckets it was saved with: resuming with another tail setting says so.
TEST(TailBuckets, ResumingWithAnotherSettingIsNamed) {
  const testing::TrainOutcome resumed =
      testing::resume_with_flags(kTwoTinyGlooRanks, "--set tail-bucket-mb=0.01", "vitddp_tail_resume");
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("with settings its run did not have (tail-bucket-mb 0.0 -> 0.01)"), std::string::npos)
      << resumed.out;
  // The restored buckets have no tail, and the start line does not claim one.
  EXPECT_EQ(resumed.out.find("(the last "), std::string::npos) << resumed.out;
}

TEST(TailBuckets, BadValuesAreRefused) {
  for (const std::string& value : {std::string("-1"), std::string("0.05"), std::string("1"), std::string("1e-09")}) {
    SCOPED_TRACE(value);
    testing::expect_refused_in_one_line(kTwoTinyGlooRanks + " --steps 1 --set tail-bucket-mb=" + value,
                                        "tail-bucket-mb must be 0 (off) or in [1e-06, --bucket-mb 0.05), got " +
                                            value);
  }
  testing::expect_refused_in_one_line("--model vit_tiny --device cpu --batch-size 4 --steps 1 --set tail-bucket-mb=1",
                                      "tail-bucket-mb cuts DDP's last gradient buckets: it needs data parallelism");
}

}  // namespace
}  // namespace vitddp
