// `train bench --sweep` end to end: the CPU smoke sweep runs and leaves its table (stdout, md,
// csv, json, svg) and per-run logs; --dry-run prints every command and runs nothing; a bad sweep
// file is one line and exit 2 before any run or file; a failed or timed-out run is a failed row
// and the sweep goes on.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <vector>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/multiprocess.h"
#include "common/train_process.h"

namespace vitddp {
namespace {

namespace fs = std::filesystem;
using testing::TempFolder;
using testing::TrainOutcome;

const std::string kSweeps = std::string(VITDDP_SOURCE_DIR) + "/configs/sweeps/";

std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string write(const TempFolder& dir, const std::string& name, const std::string& text) {
  std::string path = dir.path() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(BenchSweep, CpuSmokeSweepRunsEndToEnd) {
  TempFolder dir("vitddp_bench");
  const std::string out = dir.path() + "/out";
  TrainOutcome o = testing::run_train("VITDDP_COMMIT=test123", "bench --sweep " + kSweeps + "cpu_smoke.json --out-dir " + out,
                                      false, 300);
  ASSERT_EQ(o.code, 0) << o.out;
  const std::vector<std::string> labels = {"no DDP, 1 process", "DDP, 1 process", "DDP 2 processes", "+ bf16 hook",
                                           "+ PowerSGD (rank 1)"};
  // stdout: the title, the header and one row per run, in sweep order.
  EXPECT_NE(o.out.find("# cpu_smoke\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("- device: CPU\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("- commit: test123\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("| no DDP, 1 process | 1 | "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find(" | 1.00x | 100.0% | 0.0 | "), std::string::npos) << o.out;  // the baseline: nothing to expose
  EXPECT_EQ(o.out.find("failed"), std::string::npos) << o.out;

  for (const char* ext : {".md", ".csv", ".json", ".svg"}) EXPECT_TRUE(fs::exists(out + "/cpu_smoke" + ext)) << ext;
  const std::string md = read(out + "/cpu_smoke.md");
  EXPECT_EQ(md.rfind("# cpu_smoke\n", 0), 0u) << md;
  size_t last = 0;
  for (const std::string& label : labels) {
    size_t at = md.find("| " + label + " | ");
    ASSERT_NE(at, std::string::npos) << label << "\n" << md;
    EXPECT_GT(at, last) << label;
    last = at;
  }
  EXPECT_NE(md.find("| DDP 2 processes | 2 | "), std::string::npos) << md;

  const std::string csv = read(out + "/cpu_smoke.csv");
  EXPECT_EQ(count(csv, "\n"), 1 + labels.size()) << csv;
  EXPECT_EQ(count(csv, ",ok\n"), labels.size()) << csv;

  nlohmann::json j = nlohmann::json::parse(read(out + "/cpu_smoke.json"));
  ASSERT_EQ(j["rows"].size(), labels.size()) << j.dump(2);
  for (size_t i = 0; i < labels.size(); ++i) {
    const nlohmann::json& row = j["rows"][i];
    EXPECT_EQ(row["configuration"], labels[i]);
    EXPECT_EQ(row["status"], "ok") << row.dump();
    EXPECT_GT(row["images_per_s"].get<double>(), 0) << row.dump();
    EXPECT_EQ(row["gpus"], i < 2 ? 1 : 2) << row.dump();
    ASSERT_TRUE(row["exposed_comm_ms"].is_number()) << row.dump();  // every run is traced
    EXPECT_GE(row["exposed_comm_ms"].get<double>(), 0.0) << row.dump();
  }
  EXPECT_DOUBLE_EQ(j["rows"][0]["speedup"].get<double>(), 1.0);
  EXPECT_EQ(j["baseline"]["configuration"], labels[0]);
  EXPECT_EQ(j["header"]["commit"], "test123");

  EXPECT_EQ(count(read(out + "/cpu_smoke.svg"), "<rect class=\"bar\""), labels.size());
  EXPECT_TRUE(fs::exists(out + "/01-no-ddp-1-process.log"));
  EXPECT_TRUE(fs::exists(out + "/05-powersgd-rank-1.log"));
  EXPECT_TRUE(fs::exists(out + "/03-ddp-2-processes.trace.json"));
}

TEST(BenchSweep, DryRunPrintsEveryCommandAndRunsNothing) {
  TempFolder dir("vitddp_bench");
  const std::string script = write(dir, "torch_ddp_vit.py", "raise SystemExit('must not run')\n");
  const std::string out = dir.path() + "/out";
  TrainOutcome o = testing::run_train(
      "", "bench --sweep " + kSweeps + "seed_article_2gpu.json --dry-run --out-dir " + out + " --reference " + script);
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(count(o.out, "/18] "), 18u) << o.out;
  EXPECT_EQ(count(o.out, " --json --trace " + out + "/"), 18u) << o.out;
  // 8 P2P-off rows of ours and the reference's 8: every row of the article has a counterpart.
  EXPECT_EQ(count(o.out, "NCCL_P2P_DISABLE=1 "), 16u) << o.out;
  EXPECT_EQ(count(o.out, "no counterpart"), 0u) << o.out;
  EXPECT_NE(o.out.find("[2/18] DDP, 1 GPU\n  NCCL_NVLS_ENABLE=0 "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find(" --gpus 1 --set ddp=true --json --trace " + out + "/02-ddp-1-gpu.trace.json\n"), std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("  pytorch: NCCL_NVLS_ENABLE=0 python3 -m torch.distributed.run --standalone "
                       "--nproc_per_node=2 " + script),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("--hook bf16 --tag '+ bf16 hook, NVLink/P2P'\n"), std::string::npos) << o.out;
}

// --trace=false: the runs go without --trace (as users run them), and the table says why its
// exposed-communication column is empty.
TEST(BenchSweep, UntracedRunsHaveNoTraceFlag) {
  TempFolder dir("vitddp_bench");
  const std::string out = dir.path() + "/out";
  TrainOutcome o =
      testing::run_train("", "bench --sweep " + kSweeps + "seed_article_2gpu.json --dry-run --trace=false --out-dir " + out);
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_EQ(count(o.out, "/18] "), 18u) << o.out;
  EXPECT_EQ(count(o.out, "--trace"), 0u) << o.out;
  EXPECT_EQ(count(o.out, " --json\n"), 18u) << o.out;
}

// Bad input stops the sweep before anything runs: one line, exit 2, no out dir.
TEST(BenchSweep, BadSweepFileIsOneLineAndExit2BeforeAnyRun) {
  TempFolder dir("vitddp_bench");
  const std::string out = dir.path() + "/out";
  const std::string head = R"({"name": "bad", "defaults": {"model": "vit_tiny", "procs": 1, "steps": 1}, "runs": [)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"label": "ok"}, {"label": "typo", "bucket_mb": 25}])", "runs[1] (\"typo\"): unknown key \"bucket_mb\""},
      {R"({"label": "ok"}, {"label": "zip", "hook": "zip"}])", "runs[1] (\"zip\"): unknown hook 'zip'"},
      {R"({"label": "ok"}, {"label": "neg", "steps": -3}])", "runs[1] (\"neg\"): --steps must be in [1, 100000000], got -3"},
      {R"({"label": "ok"}, {"label": "type", "steps": "3"}])", "runs[1] (\"type\"): \"steps\" must be an integer"},
      {R"({"label": "ok", "env": {"LD_PRELOAD": "x"}}])", "env \"LD_PRELOAD\" is not allowed"}};
  for (const auto& [runs, message] : cases) {
    const std::string file = write(dir, "bad.json", head + runs + "}");
    TrainOutcome o = testing::run_train("", "bench --sweep " + file + " --out-dir " + out);
    EXPECT_EQ(o.code, 2) << runs << ": " << o.out;
    EXPECT_NE(o.out.find(message), std::string::npos) << runs << ": " << o.out;
    EXPECT_NE(o.out.find(file + ": "), std::string::npos) << o.out;
    EXPECT_EQ(count(o.out, "\n"), 1u) << runs << ": " << o.out;
    EXPECT_FALSE(fs::exists(out)) << runs;
  }
  TrainOutcome o = testing::run_train("", "bench --sweep /no/such.json --out-dir " + out);
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.out.find("cannot read sweep file /no/such.json"), std::string::npos) << o.out;
  o = testing::run_train("", "bench --out-dir " + out);
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.out.find("--sweep is required"), std::string::npos) << o.out;
  o = testing::run_train("", "bench --sweep " + kSweeps + "cpu_smoke.json --reference /no/ref.py");
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.out.find("--reference /no/ref.py: no such file"), std::string::npos) << o.out;
  EXPECT_FALSE(fs::exists(out));
}

TEST(BenchSweep, AFailedRunIsAFailedRowAndTheOthersStillRun) {
  TempFolder dir("vitddp_bench");
  const std::string out = dir.path() + "/out";
  const std::string file = write(dir, "mixed.json", R"({"name": "mixed",
      "defaults": {"model": "vit_tiny", "procs": 1, "batch-size": 2, "steps": 2, "workers": 1, "print-every": 0},
      "runs": [{"label": "first"},
               {"label": "broken", "data": "/no/such/data.safetensors"},
               {"label": "last", "procs": 2}]})");
  TrainOutcome o = testing::run_train("", "bench --sweep " + file + " --out-dir " + out, false, 300);
  ASSERT_EQ(o.code, 0) << o.out;
  const std::string md = read(out + "/mixed.md");
  EXPECT_NE(md.find("| first | 1 | "), std::string::npos) << md;
  EXPECT_NE(md.find("| broken | 1 | failed: exit 2: train: error: "), std::string::npos) << md;
  EXPECT_NE(md.find("/no/such/data.safetensors"), std::string::npos) << md;
  EXPECT_NE(md.find("| last | 2 | "), std::string::npos) << md;
  nlohmann::json j = nlohmann::json::parse(read(out + "/mixed.json"));
  ASSERT_EQ(j["rows"].size(), 3u);
  EXPECT_EQ(j["rows"][0]["status"], "ok");
  EXPECT_EQ(j["rows"][1]["status"], "failed");
  EXPECT_EQ(j["rows"][2]["status"], "ok");
  EXPECT_GT(j["rows"][2]["images_per_s"].get<double>(), 0);
  EXPECT_NE(read(out + "/02-broken.log").find("/no/such/data.safetensors"), std::string::npos);
  EXPECT_NE(o.out.find("1 of 3 rows failed"), std::string::npos) << o.out;
}

TEST(BenchSweep, ARunPastItsTimeLimitIsStoppedAndFailed) {
  TempFolder dir("vitddp_bench");
  const std::string out = dir.path() + "/out";
  const std::string file = write(dir, "slow.json", R"({"name": "slow",
      "defaults": {"model": "vit_tiny", "batch-size": 2, "workers": 1, "print-every": 0},
      "runs": [{"label": "endless", "procs": 2, "steps": 10000000}]})");
  TrainOutcome o = testing::run_train("", "bench --sweep " + file + " --out-dir " + out + " --run-timeout 3", false, 120);
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_LT(o.seconds, 3 + 10 + 15) << o.out;  // the limit, the grace before SIGKILL, start-up
  EXPECT_NE(read(out + "/slow.md").find("| endless | 2 | failed: timed out after 3 s (--run-timeout)"), std::string::npos)
      << read(out + "/slow.md");
  // No baseline throughput: speedups are unknown, and the files are still written.
  EXPECT_TRUE(fs::exists(out + "/slow.svg"));
}

// --repeat N: every configuration launched N times (each launch's log kept), the row being its
// median launch, every launch's steps/s beside it; a failed launch fails its row; a bad count is
// one line and exit 2 before anything runs.
// Note [Accuracy beside speed] end to end: each row launched once per seed, evaluated, its
// accuracy beside its throughput; a learning rate a hundred times too high misses the target and
// is flagged, the working one reaches it on every seed.
TEST(BenchSweep, SeedsAndATargetGiveTheAccuracyColumnsAndFlagAHarmfulSetting) {
  TempFolder dir("vitddp_bench");
  const std::string out = dir.path() + "/out";
  const std::string file = write(dir, "acc.json", R"({"name": "acc",
      "defaults": {"model": "vit_tiny", "procs": 1, "data": "learnable", "eval-data": "learnable",
                   "dataset-size": 512, "batch-size": 16, "steps": 40, "eval-every": 20, "optimizer": "adamw",
                   "workers": 1, "print-every": 0, "seeds": [3, 5], "target": {"eval_top1": 0.9}},
      "runs": [{"label": "adamw", "lr": 0.003}, {"label": "lr x100", "lr": 0.3}]})");
  TrainOutcome o = testing::run_train("", "bench --sweep " + file + " --out-dir " + out + " --trace=false", false, 300);
  ASSERT_EQ(o.code, 0) << o.out;
  for (const char* log : {"01-adamw.s3.log", "01-adamw.s5.log", "02-lr-x100.s3.log", "02-lr-x100.s5.log"})
    EXPECT_TRUE(fs::exists(out + "/" + log)) << log;
  const nlohmann::json j = nlohmann::json::parse(read(out + "/acc.json"));
  ASSERT_EQ(j["rows"].size(), 2u);
  const nlohmann::json& good = j["rows"][0]["accuracy"];
  EXPECT_EQ(good["seeds"], 2) << good;
  EXPECT_EQ(good["reached"], 2) << good;
  EXPECT_EQ(good["steps_to_target"]["median"], 20) << good;
  EXPECT_GT(good["seconds_to_target"]["median"].get<double>(), 0) << good;
  EXPECT_EQ(good["curves"][0].size(), 2u) << good;
  EXPECT_EQ(j["rows"][0]["accuracy_verdict"], "same");
  EXPECT_EQ(j["rows"][1]["accuracy"]["reached"], 0) << j["rows"][1];
  EXPECT_EQ(j["rows"][1]["accuracy_verdict"], "misses, lower") << j["rows"][1];
  const std::string md = read(out + "/acc.md");
  EXPECT_NE(md.find("| seeds | eval top-1 | eval loss | to target | accuracy |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 0/2: not reached | misses, lower |"), std::string::npos) << md;
  EXPECT_NE(md.find("- accuracy: "), std::string::npos) << md;
  EXPECT_TRUE(fs::exists(out + "/acc.accuracy.svg"));

  o = testing::run_train("", "bench --sweep " + file + " --dry-run");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_EQ(count(o.out, " --seed 3 "), 2u) << o.out;
  EXPECT_NE(o.out.find("adamw (target eval top-1 >= 0.9)"), std::string::npos) << o.out;
}

TEST(BenchSweep, RepeatedLaunchesGiveTheMedianLaunchAndKeepEveryOne) {
  TempFolder dir("vitddp_bench");
  const std::string out = dir.path() + "/out";
  const std::string file = write(dir, "again.json", R"({"name": "again",
      "defaults": {"model": "vit_tiny", "procs": 1, "batch-size": 2, "steps": 2, "workers": 1, "print-every": 0},
      "runs": [{"label": "one"},
               {"label": "broken", "data": "/no/such/data.safetensors"}]})");
  TrainOutcome o =
      testing::run_train("", "bench --sweep " + file + " --out-dir " + out + " --repeat 3 --trace=false", false, 300);
  ASSERT_EQ(o.code, 0) << o.out;
  for (const char* launch : {"r1", "r2", "r3"}) {
    EXPECT_TRUE(fs::exists(out + "/01-one." + launch + ".log")) << launch;
    EXPECT_TRUE(fs::exists(out + "/02-broken." + launch + ".log")) << launch;
  }
  EXPECT_NE(o.out.find("round 3/3 [2/2] broken"), std::string::npos) << o.out;
  nlohmann::json j = nlohmann::json::parse(read(out + "/again.json"));
  ASSERT_EQ(j["rows"].size(), 2u);
  const nlohmann::json& one = j["rows"][0];
  ASSERT_EQ(one["status"], "ok") << one;
  ASSERT_EQ(one["launch_steps_per_s"].size(), 3u) << one;
  std::vector<double> launches = one["launch_steps_per_s"].get<std::vector<double>>();
  std::sort(launches.begin(), launches.end());  // one batch size: images/s orders launches as steps/s does
  EXPECT_DOUBLE_EQ(one["steps_per_s"].get<double>(), launches[1]) << one;
  EXPECT_NE(j["rows"][1]["error"].get<std::string>().find("launch 1 of 3: exit 2"), std::string::npos) << j["rows"][1];
  const std::string md = read(out + "/again.md");
  EXPECT_NE(md.find("| launches (steps/s) |"), std::string::npos) << md;
  EXPECT_NE(md.find(" (3) |\n"), std::string::npos) << md;
  EXPECT_NE(md.find("- launches: 3 per configuration"), std::string::npos) << md;
  EXPECT_NE(read(out + "/again.csv").find(",launch_steps_per_s,status\n"), std::string::npos);

  o = testing::run_train("", "bench --sweep " + file + " --out-dir " + out + "/none --repeat 0");
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.out.find("--repeat must be in [1, 100], got 0"), std::string::npos) << o.out;
  EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 1) << o.out;
  EXPECT_FALSE(fs::exists(out + "/none"));
}

// A repeated sweep stopped by SIGINT keeps the launches that finished: the first round's fast
// configuration is a row, the launch cut short a failed one, and the table says it was stopped.
TEST(BenchSweep, AnInterruptedRepeatedSweepKeepsTheLaunchesThatFinished) {
  TempFolder dir("vitddp_bench");
  const std::string out = dir.path() + "/out";
  const std::string file = write(dir, "stopped.json", R"({"name": "stopped",
      "defaults": {"model": "vit_tiny", "procs": 1, "batch-size": 2, "workers": 1, "print-every": 0},
      "runs": [{"label": "quick", "steps": 2}, {"label": "endless", "steps": 10000000}]})");
  // timeout forwards the SIGINT it sends to the bench process (and keeps its exit status).
  TrainOutcome o = testing::run_train("timeout --preserve-status -s INT 8",
                                      "bench --sweep " + file + " --out-dir " + out + " --repeat 2 --trace=false", false,
                                      120);
  EXPECT_EQ(o.code, 128 + 2) << o.out;
  const std::string md = read(out + "/stopped.md");
  EXPECT_NE(md.find("| quick | 1 | "), std::string::npos) << md;
  EXPECT_EQ(md.find("| quick | 1 | failed"), std::string::npos) << md;
  EXPECT_NE(md.find("| endless | 1 | failed: stopped (the sweep was interrupted)"), std::string::npos) << md;
  EXPECT_NE(md.find("interrupted by signal 2; later runs did not run (rows from the launches that finished)"),
            std::string::npos)
      << md;
}

}  // namespace
}  // namespace vitddp
