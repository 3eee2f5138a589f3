// Sweep files: a good file parses into runs with flags, env and defaults; every kind of bad
// input (unknown key, env name or value, wrong type, empty or missing runs, malformed JSON) is
// one line naming the file, the run and the key; and every shipped configs/sweeps/*.json parses
// against the real train flags, with values train itself accepts.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/test_utils.h"
#include "train/bench/sweep.h"
#include "train/config.h"

namespace vitddp::bench {
namespace {

// The train flags, typed from their defaults ("ddp", the DDP-on-one-GPU switch the seed sweep
// asks for, included), as `train bench --sweep` builds its schema.
SweepSchema train_schema() { return SweepSchema::from_defaults(TrainConfig().to_json()); }

const char* kGood = R"({
  "name": "small",
  "description": "two runs",
  "baseline": "one",
  "defaults": {"steps": 5, "env": {"NCCL_DEBUG": "WARN"}},
  "runs": [
    {"label": "two", "gpus": 2, "bucket-mb": 100, "hook": "bf16", "static-graph": true,
     "grad-as-bucket-view": false, "env": {"NCCL_P2P_DISABLE": "1", "NCCL_BUFFSIZE": 4194304}},
    {"label": "one", "gpus": 1, "steps": 7}
  ]
})";

TEST(Sweep, ParsesAGoodFile) {
  Sweep s = parse_sweep(kGood, "small.json", train_schema());
  EXPECT_EQ(s.name, "small");
  EXPECT_EQ(s.description, "two runs");
  ASSERT_EQ(s.runs.size(), 2u);
  EXPECT_EQ(s.baseline, 1u);
  const SweepRun& two = s.runs[0];
  EXPECT_EQ(two.label, "two");
  EXPECT_EQ(two.workers(), 2);
  EXPECT_EQ(two.to_args(), (std::vector<std::string>{"--steps", "5", "--gpus", "2", "--bucket-mb", "100", "--hook",
                                                     "bf16", "--static-graph", "--grad-as-bucket-view=false"}));
  EXPECT_EQ(two.env, (std::vector<std::pair<std::string, std::string>>{
                         {"NCCL_DEBUG", "WARN"}, {"NCCL_P2P_DISABLE", "1"}, {"NCCL_BUFFSIZE", "4194304"}}));
  const SweepRun& one = s.runs[1];
  EXPECT_EQ(one.to_args(), (std::vector<std::string>{"--steps", "7", "--gpus", "1"}));  // overrides the default
  EXPECT_EQ(one.env.size(), 1u);
}

// Expert keys become --set KEY=VALUE: train takes them only that way (or in a config file).
TEST(Sweep, ExpertKeysBecomeSetArguments) {
  Sweep s = parse_sweep(R"({"name": "x", "runs": [{"label": "a", "gpus": 2, "tail-bucket-mb": 25, "update": "sharded",
                                                   "ddp": true}]})",
                        "x.json", train_schema());
  EXPECT_EQ(s.runs[0].to_args(is_public_flag),
            (std::vector<std::string>{"--gpus", "2", "--set", "tail-bucket-mb=25", "--set", "update=sharded", "--set",
                                      "ddp=true"}));
}

TEST(Sweep, BaselineDefaultsToTheFirstRunAndWorkersToOne) {
  Sweep s = parse_sweep(R"({"name": "x", "runs": [{"label": "a"}, {"label": "b", "procs": 3}]})", "x.json",
                        train_schema());
  EXPECT_EQ(s.baseline, 0u);
  EXPECT_EQ(s.runs[0].workers(), 1);
  EXPECT_EQ(s.runs[1].workers(), 3);
}

TEST(Sweep, NameListSchemaAcceptsAnyScalar) {
  SweepSchema names(std::vector<std::string>{"gpus", "hook"});
  Sweep s = parse_sweep(R"({"name": "x", "runs": [{"label": "a", "hook": 3, "gpus": 2}]})", "x.json", names);
  EXPECT_EQ(s.runs[0].to_args(), (std::vector<std::string>{"--hook", "3", "--gpus", "2"}));
  EXPECT_TRUE(testing::throws_with(
      [&] { parse_sweep(R"({"name": "x", "runs": [{"label": "a", "hook": [1]}]})", "x.json", names); },
      {"x.json: runs[0] (\"a\"): \"hook\" must be a boolean, number or string"}));
}

// Every error is one line, names the file, and holds each of `parts`.
::testing::AssertionResult rejects(const std::string& text, const std::vector<std::string>& parts) {
  try {
    parse_sweep(text, "sweeps/bad.json", train_schema());
  } catch (const Error& e) {
    std::string what = e.what();
    if (what.find('\n') != std::string::npos) return ::testing::AssertionFailure() << "more than one line: " << what;
    if (what.rfind("sweeps/bad.json: ", 0) != 0) return ::testing::AssertionFailure() << "no file name: " << what;
    for (const auto& p : parts)
      if (what.find(p) == std::string::npos) return ::testing::AssertionFailure() << "lacks \"" << p << "\": " << what;
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "accepted: " << text;
}

std::string one_run(const std::string& run) { return R"({"name": "bad", "runs": [{"label": "ok"}, )" + run + "]}"; }

TEST(Sweep, RejectsUnknownKeys) {
  EXPECT_TRUE(rejects(one_run(R"({"label": "typo", "bucket_mb": 25})"),
                      {"runs[1] (\"typo\")", "unknown key \"bucket_mb\"", "bucket-mb"}));
  EXPECT_TRUE(rejects(R"({"name": "bad", "run": []})", {"unknown key \"run\""}));
  EXPECT_TRUE(rejects(R"({"name": "bad", "defaults": {"gpu": 2}, "runs": [{"label": "a"}]})",
                      {"defaults", "unknown key \"gpu\""}));
}

TEST(Sweep, SeedsAndATargetParse) {
  const Sweep s = parse_sweep(R"({"name": "acc", "defaults": {"eval-data": "val", "seeds": 3},
      "runs": [{"label": "a", "target": {"eval_top1": 0.95}}, {"label": "b", "seeds": [4, 7],
               "target": {"eval_loss": 0.3}}]})",
                              "acc.json", train_schema());
  EXPECT_EQ(s.runs[0].seeds, (std::vector<int64_t>{0, 1, 2}));
  ASSERT_TRUE(s.runs[0].target);
  EXPECT_EQ(s.runs[0].target->metric, "eval_top1");
  EXPECT_EQ(s.runs[0].target->value, 0.95);
  EXPECT_EQ(s.runs[1].seeds, (std::vector<int64_t>{4, 7}));
  EXPECT_EQ(s.runs[1].target->describe(), "eval loss <= 0.3");
  for (const std::string& a : s.runs[0].to_args()) EXPECT_NE(a, "--seeds");
}

TEST(Sweep, BadSeedsAndTargetsAreRefused) {
  EXPECT_TRUE(rejects(one_run(R"({"label": "t", "eval-data": "v", "target": {"top1": 0.9}})"),
                      {"runs[1] (\"t\")", "unknown target metric \"top1\"", "eval_top1, eval_loss"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "t", "target": {"eval_top1": 0.9}})"),
                      {"a target (eval top-1 >= 0.9) needs evaluation: set \"eval-data\""}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "t", "eval-data": "v", "target": {"eval_top1": 95}})"),
                      {"target eval_top1 must be a share in (0, 1]"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "t", "eval-data": "v", "target": {"eval_top1": 0.9, "eval_loss": 1}})"),
                      {"\"target\" must be one metric and its value"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "t", "seeds": 0})"), {"\"seeds\" must be a count in [1, 100]"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "t", "seeds": [1, 1]})"), {"seed 1 is listed twice"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "t", "seeds": [-1]})"), {"whole numbers >= 0"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "t", "seeds": 2, "seed": 5})"), {"sets both \"seed\" and \"seeds\""}));
}

TEST(Sweep, RejectsEnvOutsideTheAllowList) {
  EXPECT_TRUE(rejects(one_run(R"({"label": "e", "env": {"LD_PRELOAD": "x.so"}})"),
                      {"runs[1] (\"e\")", "env \"LD_PRELOAD\" is not allowed", "NCCL_P2P_DISABLE"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "e", "env": {"NCCL_P2P_DISABLE": "yes"}})"),
                      {"env \"NCCL_P2P_DISABLE\" must be \"0\" or \"1\", got \"yes\""}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "e", "env": {"NCCL_PROTO": "LL,Fast"}})"), {"NCCL_PROTO"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "e", "env": {"NCCL_NTHREADS": 100}})"), {"NCCL_NTHREADS", "64"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "e", "env": {"NCCL_BUFFSIZE": "-4"}})"), {"NCCL_BUFFSIZE"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "e", "env": {"NCCL_MAX_CTAS": "0"}})"), {"NCCL_MAX_CTAS", "1 to 64"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "e", "env": {"NCCL_MIN_CTAS": 65}})"), {"NCCL_MIN_CTAS", "1 to 64"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "e", "env": {"NCCL_MIN_NCHANNELS": "0"}})"), {"NCCL_MIN_NCHANNELS", "1 to 64"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "e", "env": {"NCCL_CTA_POLICY": "3"}})"), {"NCCL_CTA_POLICY", "efficiency"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "e", "env": {"NCCL_SHM_MEMCPY_MODE": "4"}})"), {"NCCL_SHM_MEMCPY_MODE", "both"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "e", "env": {"CUDA_MODULE_LOADING": "eager"}})"), {"LAZY or EAGER"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "e", "env": {"CUDA_DEVICE_MAX_CONNECTIONS": "33"}})"),
                      {"CUDA_DEVICE_MAX_CONNECTIONS", "1 to 32"}));
  EXPECT_NO_THROW(parse_sweep(one_run(R"({"label": "e", "env": {"CUDA_DEVICE_MAX_CONNECTIONS": 32}})"), "x.json",
                              train_schema()));
  EXPECT_NO_THROW(parse_sweep(one_run(
      R"({"label": "e", "env": {"NCCL_SHM_USE_CUDA_MEMCPY": 1, "NCCL_SHM_MEMCPY_MODE": "3", "CUDA_MODULE_LOADING": "EAGER"}})"),
      "x.json", train_schema()));
  EXPECT_TRUE(rejects(one_run(R"({"label": "e", "env": {"NCCL_DEBUG": true}})"), {"must be a string or an integer"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "e", "env": ["NCCL_DEBUG"]})"), {"\"env\" must be an object"}));
  // Case and exclusion lists as NCCL reads them.
  EXPECT_NO_THROW(parse_sweep(one_run(R"({"label": "e", "env": {"NCCL_ALGO": "^ring,tree", "NCCL_PROTO": "Simple"}})"),
                              "x.json", train_schema()));
}

TEST(Sweep, RejectsWrongTypes) {
  EXPECT_TRUE(rejects(one_run(R"({"label": "t", "gpus": "two"})"), {"runs[1] (\"t\")", "\"gpus\" must be an integer"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "t", "gpus": 0})"), {"\"gpus\" must be a positive integer"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "t", "static-graph": "yes"})"), {"\"static-graph\" must be a boolean"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "t", "bucket-mb": "25"})"), {"\"bucket-mb\" must be a number"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": "t", "hook": 1})"), {"\"hook\" must be a string"}));
  EXPECT_TRUE(rejects(one_run(R"({"label": 3})"), {"runs[1]", "\"label\" must be a non-empty string"}));
  EXPECT_TRUE(rejects(one_run(R"({"gpus": 2})"), {"runs[1]", "has no \"label\""}));
  EXPECT_TRUE(rejects(one_run(R"("gpus")"), {"runs[1]", "must be a JSON object"}));
  EXPECT_TRUE(rejects(R"({"name": 5, "runs": [{"label": "a"}]})", {"\"name\" must be a string"}));
  EXPECT_TRUE(rejects(R"({"name": "bad", "runs": {"label": "a"}})", {"\"runs\" must be a list"}));
}

TEST(Sweep, RejectsEmptyOrMissingRuns) {
  EXPECT_TRUE(rejects(R"({"name": "bad", "runs": []})", {"\"runs\" is empty"}));
  EXPECT_TRUE(rejects(R"({"name": "bad"})", {"needs \"runs\""}));
  EXPECT_TRUE(rejects(R"({"runs": [{"label": "a"}]})", {"needs a non-empty \"name\""}));
  EXPECT_TRUE(rejects(R"([1, 2])", {"must hold a JSON object"}));
}

TEST(Sweep, RejectsDuplicateLabelsAndAMissingBaseline) {
  EXPECT_TRUE(rejects(one_run(R"({"label": "ok"})"), {"runs[1] (\"ok\")", "used by an earlier run"}));
  EXPECT_TRUE(rejects(R"({"name": "bad", "baseline": "nope", "runs": [{"label": "a"}]})",
                      {"\"baseline\" names \"nope\""}));
}

TEST(Sweep, RejectsMalformedJson) {
  EXPECT_TRUE(rejects(R"({"name": "bad", "runs": [{"label": "a",}]})", {"malformed JSON"}));
  EXPECT_TRUE(rejects("", {"malformed JSON"}));
}

TEST(Sweep, UnreadableFileIsAnError) {
  EXPECT_TRUE(testing::throws_with([] { parse_sweep_file("/no/such/sweep.json", train_schema()); },
                                   {"cannot read sweep file /no/such/sweep.json"}));
}

// Every shipped sweep parses against the train flags, and train accepts every run's flags.
TEST(Sweep, EveryShippedSweepParses) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(VITDDP_SOURCE_DIR) / "configs" / "sweeps";
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    SCOPED_TRACE(entry.path().string());
    Sweep sweep;
    ASSERT_NO_THROW(sweep = parse_sweep_file(entry.path().string(), train_schema()));
    EXPECT_EQ(sweep.name, entry.path().stem().string()) << "a sweep's name should match its file name";
    for (const SweepRun& run : sweep.runs) {
      std::vector<std::string> args = {"train"};
      for (const std::string& a : run.to_args(is_public_flag)) args.push_back(a);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      TrainConfig config;
      ASSERT_NO_THROW(parse_train_config(static_cast<int>(argv.size()), argv.data(), &config)) << run.label;
      nlohmann::json parsed = config.to_json();
      for (const auto& [key, value] : run.flags)
        EXPECT_EQ(parsed[key], value) << run.label << ": --" << key << " did not arrive";
    }
  }
  EXPECT_GE(files, 1);
}

TEST(Sweep, SeedArticleSweepCoversTheTable) {
  Sweep s = parse_sweep_file(std::string(VITDDP_SOURCE_DIR) + "/configs/sweeps/seed_article_2gpu.json", train_schema());
  EXPECT_EQ(s.runs[s.baseline].workers(), 1);
  int p2p_off = 0, two_gpu = 0;
  for (const SweepRun& r : s.runs) {
    two_gpu += r.workers() == 2;
    for (const auto& [k, v] : r.env) p2p_off += k == "NCCL_P2P_DISABLE" && v == "1";
  }
  EXPECT_EQ(two_gpu, 16);  // the article's 8 configurations, each over NVLink and with P2P off
  EXPECT_EQ(p2p_off, 8);
}

}  // namespace
}  // namespace vitddp::bench
