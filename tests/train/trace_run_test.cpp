// --trace end to end on the CPU: `train --procs 2` (Gloo) writes one Chrome trace holding both
// ranks' steps, phases and buckets (train/observe/trace.h), prints its analysis and puts it in the JSON
// result; an unwritable path is one line and exit 2 before anything runs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "common/multiprocess.h"
#include "common/train_process.h"
#include "common/trace_run_checks.h"

namespace vitddp {
namespace {

namespace fs = std::filesystem;

TEST(TraceRun, TwoGlooRanksEveryStepPhaseAndBucket) {
  const fs::path dir = fs::temp_directory_path() / ("vitddp_trace_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "trace.json").string();
  testing::TrainOutcome o = testing::run_train(
      "", "--procs 2 --model vit_tiny --batch-size 4 --set workers=1 --steps 4 --set untimed-steps=1 "
          "--bucket-mb 0.05 --print-every 0 --json --trace " + path);
  ASSERT_EQ(o.code, 0) << o.out;
  const nlohmann::json j = o.json();
  EXPECT_EQ(j["trace"]["steps"], 6) << o.out;  // the timed steps of both ranks
  EXPECT_TRUE(j["exposed_comm_ms"].is_number()) << o.out;
  EXPECT_NE(o.out.find("ms/step of which exposed "), std::string::npos) << "the summary line carries the totals\n"
                                                                         << o.out;
  const size_t buckets = 8;  // vit_tiny at 0.05 MB buckets
  EXPECT_EQ(j["buckets"], buckets) << o.out;
  EXPECT_EQ(j["trace"]["buckets"].size(), buckets) << o.out;
  nlohmann::json doc = testing::read_trace(path);
  testing::check_traced_run(doc, /*ranks=*/2, /*steps=*/4, buckets, /*slack_us=*/0.0);
  EXPECT_FALSE(fs::exists(path + ".rank-1.json")) << "the per-rank part is merged and removed";
  fs::remove_all(dir);
}

// With the updates in the next forward a step's communication ends in the next step: the
// tracer reads each step once the one after it has run, and every step and bucket is there.
TEST(TraceRun, UpdatesInTheNextForwardTraceEveryStepAndBucket) {
  testing::TempFolder dir("vitddp_trace_uif");
  const std::string path = (dir / "trace.json").string();
  testing::TrainOutcome o = testing::run_train(
      "", "--procs 2 --model vit_tiny --batch-size 4 --set workers=1 --steps 5 --set untimed-steps=1 "
          "--bucket-mb 0.05 --set update=next-forward --set ready-order-share=0.4 --print-every 1 --json --trace " + path);
  ASSERT_EQ(o.code, 0) << o.out;
  const nlohmann::json j = o.json();
  EXPECT_EQ(j["trace"]["steps"], 8) << o.out;
  EXPECT_EQ(j["losses"].size(), 5u) << o.out;
  // 8 buckets, of which the first 3 hold 0.4 of the bytes (the run prints it).
  EXPECT_NE(o.out.find("8 buckets of <= 0.05 MB, hook allreduce, gradients as bucket views, updates in the next "
                       "forward, 3 buckets launched in ready order and the rest after backward"),
            std::string::npos)
      << o.out;
  testing::check_traced_run(testing::read_trace(path), /*ranks=*/2, /*steps=*/5, /*buckets=*/8, /*slack_us=*/0.0,
                            /*in_index_order=*/3);
}

TEST(TraceRun, UnwritablePathFailsBeforeAnythingRuns) {
  testing::TrainOutcome o =
      testing::run_train("", "--procs 2 --model vit_tiny --steps 2 --trace /nonexistent-folder/t.json");
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.out.find("--trace /nonexistent-folder/t.json: folder /nonexistent-folder does not exist"),
            std::string::npos)
      << o.out;
  EXPECT_EQ(o.out.find("training"), std::string::npos) << "nothing may run first:\n" << o.out;
}

}  // namespace
}  // namespace vitddp
