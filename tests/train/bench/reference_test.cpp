// The mapping of a sweep run to the PyTorch reference script's command line: the seed sweep's
// rows (no DDP, DDP on one GPU under torchrun, two GPUs with each option), and the runs that have
// no counterpart there (CPU processes, a model or data the script lacks, flags it has no
// equivalent of), which must say why instead of comparing different things.
#include <gtest/gtest.h>

#include "train/bench/reference.h"
#include "train/config.h"

namespace vitddp::bench {
namespace {

using Args = std::vector<std::string>;

SweepSchema schema() { return SweepSchema::from_defaults(TrainConfig().to_json()); }

Sweep seed_sweep() {
  return parse_sweep_file(std::string(VITDDP_SOURCE_DIR) + "/configs/sweeps/seed_article_2gpu.json", schema());
}

const SweepRun& run_labelled(const Sweep& s, const std::string& label) {
  for (const SweepRun& r : s.runs)
    if (r.label == label) return r;
  throw std::runtime_error("no run " + label);
}

ReferenceCommand map(const SweepRun& run) { return reference_command(run, TrainConfig().to_json(), "ref.py"); }

const Args kCommon = {"--model", "vit_l_32", "--batch-size", "32", "--warmup", "10", "--steps", "20",
                      "--workers", "4", "--gpu-data", "--precision", "fp32", "--optimizer", "sgd"};

Args concat(Args a, const Args& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(Reference, OneGpuWithoutDdpRunsThePlainScript) {
  ReferenceCommand c = map(run_labelled(seed_sweep(), "no DDP, 1 GPU"));
  EXPECT_EQ(c.gpus, 1);
  EXPECT_EQ(c.argv, concat(concat({"python3", "ref.py"}, kCommon), {"--grad-as-bucket-view", "--tag", "no DDP, 1 GPU"}));
}

TEST(Reference, DdpOnOneGpuGoesThroughTorchrun) {
  ReferenceCommand c = map(run_labelled(seed_sweep(), "DDP, 1 GPU"));
  EXPECT_EQ(c.gpus, 1);
  Args want = {"python3", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", "ref.py"};
  want = concat(concat(want, kCommon),
                {"--ddp", "--bucket-mb", "25.0", "--grad-as-bucket-view", "--hook", "none", "--tag", "DDP, 1 GPU"});
  EXPECT_EQ(c.argv, want);
}

TEST(Reference, TwoGpuRowsCarryBucketsGraphViewAndHook) {
  const Sweep s = seed_sweep();
  const Args torchrun = {"python3", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "ref.py"};
  ReferenceCommand c = map(run_labelled(s, "DDP 2 GPUs, one 2000 MB bucket, P2P off"));
  EXPECT_EQ(c.gpus, 2);
  EXPECT_EQ(c.argv, concat(concat(torchrun, kCommon), {"--ddp", "--bucket-mb", "2000", "--hook", "none", "--tag",
                                                       "DDP 2 GPUs, one 2000 MB bucket, P2P off"}));
  c = map(run_labelled(s, "+ bf16 hook, NVLink/P2P"));
  EXPECT_EQ(c.argv, concat(concat(torchrun, kCommon), {"--ddp", "--bucket-mb", "2000", "--static-graph",
                                                       "--grad-as-bucket-view", "--hook", "bf16", "--tag",
                                                       "+ bf16 hook, NVLink/P2P"}));
  c = map(run_labelled(s, "+ PowerSGD (rank 1), P2P off"));
  EXPECT_EQ(c.argv, concat(concat(torchrun, kCommon), {"--ddp", "--bucket-mb", "2000", "--static-graph",
                                                       "--grad-as-bucket-view", "--hook", "powersgd",
                                                       "--powersgd-rank", "1", "--tag", "+ PowerSGD (rank 1), P2P off"}));
  // Every row of the seed article has a counterpart.
  for (const SweepRun& r : s.runs) EXPECT_FALSE(map(r).argv.empty()) << r.label << ": " << map(r).no_counterpart;
}

TEST(Reference, ImageSizeAndTheDefaultModelMap) {
  Sweep s = parse_sweep(R"({"name": "x", "runs": [{"label": "a", "gpus": 1, "image-size": 160, "lr": 0.5,
                                                   "seed": 3, "model": "vit_b_16", "data": "synthetic"},
                                                  {"label": "b"}]})",
                        "x.json", schema());
  Args want = {"python3", "ref.py", "--model", "vit_b_16", "--batch-size", "32", "--img", "160", "--warmup", "5",
               "--steps", "20", "--workers", "4", "--precision", "fp32", "--optimizer", "sgd",
               "--grad-as-bucket-view", "--tag", "a"};
  EXPECT_EQ(map(s.runs[0]).argv, want);  // lr and seed do not change what is measured
  EXPECT_EQ(map(s.runs[1]).argv[3], "vit_l_32");  // "auto" is vit_l_32 on a GPU
}

TEST(Reference, RunsWithoutACounterpartSayWhy) {
  Sweep smoke = parse_sweep_file(std::string(VITDDP_SOURCE_DIR) + "/configs/sweeps/cpu_smoke.json", schema());
  for (const SweepRun& r : smoke.runs) {
    ReferenceCommand c = map(r);
    EXPECT_TRUE(c.argv.empty()) << r.label;
    EXPECT_EQ(c.no_counterpart, "--procs: the reference trains on GPUs only") << r.label;
  }
  Sweep s = parse_sweep(R"({"name": "x", "runs": [
      {"label": "a", "gpus": 2, "layers": 4},
      {"label": "b", "gpus": 2, "data": "learnable"},
      {"label": "c", "gpus": 2, "accumulate": 2},
      {"label": "d", "gpus": 1, "model": "vit_h_14"},
      {"label": "e", "device": "cpu"},
      {"label": "f", "gpus": 2, "hook": "powersgd", "powersgd-start-iter": 10}]})",
                        "x.json", schema());
  const std::vector<std::string> why = {"layers 4 has no counterpart in the reference script",
                                        "--data learnable: the reference has random images only (synthetic, gpu)",
                                        "--accumulate 2 has no counterpart in the reference script",
                                        "--model vit_h_14: the reference has vit_b_16, vit_b_32 and vit_l_32",
                                        "--device cpu: the reference trains on GPUs only",
                                        "--powersgd-start-iter 10 has no counterpart in the reference script"};
  for (size_t i = 0; i < why.size(); ++i) {
    ReferenceCommand c = map(s.runs[i]);
    EXPECT_TRUE(c.argv.empty()) << s.runs[i].label;
    EXPECT_EQ(c.no_counterpart, why[i]) << s.runs[i].label;
  }
}

}  // namespace
}  // namespace vitddp::bench
