// The `train` program end to end: bad input gets one clear line on stderr and exit code 2,
// never a crash or a hang; a small run on the CPU works and prints progress and a summary.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "common/test_utils.h"
#include "common/train_process.h"
#include "framework/io/safetensors.h"
#include "models/vit/vit.h"

namespace vitddp {
namespace {

struct ProcessResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::filesystem::path temp_dir() {
  auto dir = std::filesystem::temp_directory_path() / ("vitddp_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs train with `args` on the CPU (CUDA_VISIBLE_DEVICES hides any GPU), with a time limit.
ProcessResult train(const std::string& args) {
  auto dir = temp_dir();
  std::string cmd = "CUDA_VISIBLE_DEVICES= timeout 120 " + std::string(VITDDP_TRAIN_BIN) + " " + args + " > " +
                    (dir / "out").string() + " 2> " + (dir / "err").string();
  int status = std::system(cmd.c_str());
  ProcessResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(dir / "out");
  r.err = slurp(dir / "err");
  return r;
}

::testing::AssertionResult bad_input(const std::string& args, const std::string& expected) {
  ProcessResult r = train(args);
  if (r.exit_code != 2)
    return ::testing::AssertionFailure() << "exit " << r.exit_code << " for `train " << args << "`: " << r.err;
  if (r.err.find(expected) == std::string::npos)
    return ::testing::AssertionFailure() << "stderr lacks \"" << expected << "\": " << r.err;
  size_t lines = std::count(r.err.begin(), r.err.end(), '\n');
  if (lines != 1) return ::testing::AssertionFailure() << "expected one line, got " << lines << ": " << r.err;
  return ::testing::AssertionSuccess();
}

const char* kTiny = "--model vit_tiny --steps 2 --batch-size 4 --set workers=1";

TEST(TrainCli, BadFlagsAndModels) {
  EXPECT_TRUE(bad_input("--no-such-flag", "--no-such-flag"));
  EXPECT_TRUE(bad_input("--model vit_x", "unknown model 'vit_x'"));
  EXPECT_TRUE(bad_input(std::string(kTiny) + " --batch-size 0", "--batch-size must be positive"));
  EXPECT_TRUE(bad_input(std::string(kTiny) + " --batch-size -3", "--batch-size must be positive"));
  EXPECT_TRUE(bad_input(std::string(kTiny) + " --steps 0", "--steps must be in [1, 100000000], got 0"));
  EXPECT_TRUE(bad_input(std::string(kTiny) + " --set hidden-dim=-1", "hidden-dim must be positive"));
  EXPECT_TRUE(bad_input(std::string(kTiny) + " --set patch-size=7", "patch size 7 does not divide image size 32"));
  EXPECT_TRUE(bad_input(std::string(kTiny) + " --optimizer lamb", "unknown optimizer 'lamb'"));
  EXPECT_TRUE(bad_input(std::string(kTiny) + " --steps abc", "steps"));
  EXPECT_TRUE(bad_input(std::string(kTiny) + " --device tpu", "unknown device 'tpu'"));
}

TEST(TrainCli, GpusWithoutGpusIsAClearError) {
  EXPECT_TRUE(bad_input(std::string(kTiny) + " --gpus 2", "--gpus 2 asked for but 0 GPU(s) visible"));
  EXPECT_TRUE(bad_input(std::string(kTiny) + " --gpus 2 --device cuda:1",
                        "--gpus 2 gives each rank the GPU of its local rank; --device cuda:1 would put every rank on "
                        "one GPU (leave --device out)"));
  EXPECT_TRUE(bad_input(std::string(kTiny) + " --device cuda", "cuda:0 asked for but 0 GPU(s) visible"));
  EXPECT_TRUE(bad_input(std::string(kTiny) + " --procs 2 --op-breakdown", "--op-breakdown times CUDA kernels"));
  EXPECT_TRUE(bad_input(std::string(kTiny) + " --procs 2 --cuda-graph",
                        "--cuda-graph replays CUDA work: it needs a GPU, not --procs or --device cpu"));
  EXPECT_TRUE(bad_input(std::string(kTiny) + " --cuda-graph", "--cuda-graph replays CUDA work: it needs a GPU, not cpu"));
  EXPECT_TRUE(bad_input(std::string(kTiny) + " --device cpu --cuda-graph",
                        "--cuda-graph replays CUDA work: it needs a GPU, not --procs or --device cpu"));
  // Refused before training (one line on stderr, no progress lines on stdout).
  ProcessResult r = train(std::string(kTiny) + " --device cpu --op-breakdown");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--op-breakdown times CUDA kernels: it needs a GPU"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("step "), std::string::npos) << r.out;
}

// Where a run writes is checked before it trains: --save's folder, a --checkpoint-dir that cannot be
// made, and one that holds an earlier run's checkpoints without --resume (its first save would
// delete them: they are left as they are). A hook without data parallelism is refused, not ignored.
TEST(TrainCli, OutputsAndDdpOnlyFlagsAreCheckedBeforeTraining) {
  const auto dir = temp_dir() / "outputs";
  std::filesystem::create_directories(dir);
  const std::string tiny(kTiny);
  EXPECT_TRUE(bad_input(tiny + " --save " + (dir / "missing" / "w.safetensors").string(),
                        "--save " + (dir / "missing" / "w.safetensors").string() + ": folder"));
  std::ofstream(dir / "a_file") << "x";
  EXPECT_TRUE(bad_input(tiny + " --checkpoint-dir " + (dir / "a_file" / "ckpt").string(), "cannot make the folder"));

  const std::string ckpt = (dir / "ckpt").string();
  ProcessResult first = train(tiny + " --checkpoint-dir " + ckpt + " --checkpoint-every 1");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_TRUE(std::filesystem::exists(ckpt + "/step-000002")) << first.out;
  EXPECT_TRUE(bad_input(tiny + " --checkpoint-dir " + ckpt + " --checkpoint-every 1",
                        "--checkpoint-dir " + ckpt + " already holds checkpoints (newest: step 2); pass --resume"));
  EXPECT_TRUE(std::filesystem::exists(ckpt + "/step-000002"));
  EXPECT_TRUE(std::filesystem::exists(ckpt + "/step-000001"));

  ProcessResult resumed = train(tiny + " --checkpoint-dir " + ckpt + " --resume --steps 3 --seed 7");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("warning: resuming " + ckpt + "/step-000002 with settings its run did not have (--seed "),
            std::string::npos)
      << resumed.out;
  EXPECT_NE(resumed.out.find(" -> 7): training goes on"), std::string::npos) << resumed.out;

  EXPECT_TRUE(bad_input(tiny + " --hook powersgd", "--hook powersgd compresses DDP's gradient buckets: it needs data "
                                                   "parallelism"));
  EXPECT_TRUE(bad_input(tiny + " --procs 2 --hook powersgd --set powersgd-error-dtype=bf16",
                        "powersgd-error-dtype must be f32 or bucket, got 'bf16'"));
  EXPECT_TRUE(bad_input(tiny + " --device cpu --set transport=host-copy", "transport host-copy moves GPU buffers with "
                                                                          "the copy engines: it needs a GPU, not --procs"));
  EXPECT_TRUE(bad_input(tiny + " --procs 2 --set transport=host-copy", "it needs a GPU, not --procs or --device cpu"));
  EXPECT_TRUE(bad_input(tiny + " --procs 2 --set host-copy-overlap=true",
                        "host-copy-overlap changes how the host copy's all-reduces follow each other: it needs "
                        "transport host-copy"));
  EXPECT_TRUE(bad_input(tiny + " --procs 2 --set host-copy-reduce-beside=true",
                        "host-copy-reduce-beside changes where the host copy adds received chunks: it needs transport "
                        "host-copy"));
  EXPECT_TRUE(bad_input(tiny + " --set timeout=0.00001", "timeout must be in [0.001, 1e7] seconds"));
  EXPECT_TRUE(bad_input(tiny + " --set checkpoint-keep=4294967296", "checkpoint-keep must be in [1, 1000000]"));
}

// Expert keys are given with --set (or in a config file), never as flags; a flag of earlier
// versions says what replaced it; --set refuses unknown keys and values of the wrong type.
TEST(TrainCli, ExpertKeysAndRemovedFlags) {
  const std::string tiny(kTiny);
  EXPECT_TRUE(bad_input(tiny + " --tail-bucket-mb 5",
                        "--tail-bucket-mb is an expert key: give it as --set tail-bucket-mb=VALUE or in a --config file"));
  EXPECT_TRUE(bad_input(tiny + " --warmup 3", "--warmup was removed: --steps counts every step"));
  EXPECT_TRUE(bad_input(tiny + " --update-in-forward", "--update-in-forward was removed: give --set update=next-forward"));
  EXPECT_TRUE(bad_input(tiny + " --sm-carveout 2", "--sm-carveout was removed: it never paid"));
  EXPECT_TRUE(bad_input(tiny + " --set no-such-key=1", "--set: unknown key 'no-such-key'"));
  EXPECT_TRUE(bad_input(tiny + " --set workers=two", "--set workers: 'two' is not an integer"));
  EXPECT_TRUE(bad_input(tiny + " --set ddp=maybe", "--set ddp: 'maybe' is not a boolean"));
  EXPECT_TRUE(bad_input(tiny + " --set workers", "--set takes KEY=VALUE, got 'workers'"));
  EXPECT_TRUE(bad_input(tiny + " --set update=later", "update must be after-backward, next-forward or sharded"));
  // --help-expert lists every expert key, and --help none of them.
  ProcessResult expert = train("--help-expert");
  EXPECT_EQ(expert.exit_code, 0) << expert.err;
  ProcessResult help = train("--help");
  EXPECT_EQ(help.exit_code, 0) << help.err;
  for (const char* key : {"transport", "update", "tail-bucket-mb", "workers", "untimed-steps", "gemm-autotune"}) {
    EXPECT_NE(expert.out.find("  " + std::string(key) + " (default "), std::string::npos) << key;
    EXPECT_EQ(help.out.find("--" + std::string(key) + " "), std::string::npos) << key;
  }
  size_t flags = 0;
  for (size_t at = help.out.find("\n  --"); at != std::string::npos; at = help.out.find("\n  --", at + 1)) ++flags;
  // The settings (40 with the training recipe and evaluation) and --config, --set, --help-expert.
  EXPECT_LE(flags, 44u) << help.out;
}

TEST(TrainCli, BadConfigFiles) {
  auto dir = temp_dir();
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  EXPECT_TRUE(bad_input("--config " + write("bad.json", "{\"steps\": 3,"), "malformed JSON"));
  EXPECT_TRUE(bad_input("--config " + write("unknown.json", "{\"stepz\": 3}"), "unknown key \"stepz\""));
  EXPECT_TRUE(bad_input("--config " + write("type.json", "{\"steps\": \"3\"}"), "\"steps\" must be an integer"));
  EXPECT_TRUE(bad_input("--config " + write("array.json", "[1, 2]"), "must hold a JSON object"));
  EXPECT_TRUE(bad_input("--config " + (dir / "missing.json").string(), "cannot read config file"));
}

TEST(TrainCli, BadSafetensorsFiles) {
  auto dir = temp_dir();
  EXPECT_TRUE(bad_input(std::string(kTiny) + " --init-from " + (dir / "nope.safetensors").string(), "nope.safetensors"));
  // A whole, valid file of the wrong model: shapes are named.
  VisionTransformer other(vit_config_by_name("vit_tiny"), 1);
  NamedTensors params = other.named_parameters();
  std::string good = (dir / "tiny.safetensors").string();
  write_safetensors(good, params);
  EXPECT_TRUE(bad_input(std::string(kTiny) + " --set hidden-dim=32 --init-from " + good, "in the file but"));
  // Truncated and bit-flipped copies of it.
  std::string bytes = slurp(good);
  std::ofstream(dir / "trunc.safetensors", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  EXPECT_TRUE(bad_input(std::string(kTiny) + " --init-from " + (dir / "trunc.safetensors").string(), "trunc.safetensors"));
  std::string flipped = bytes;
  flipped[12] ^= 0x5a;
  std::ofstream(dir / "flip.safetensors", std::ios::binary) << flipped;
  EXPECT_TRUE(bad_input(std::string(kTiny) + " --init-from " + (dir / "flip.safetensors").string(), "flip.safetensors"));
  // A data file with the wrong dtype for labels.
  Generator gen(3);
  Tensor images = testing::random_tensor({4, 3, 32, 32}, gen, DType::kF32);
  Tensor labels = testing::random_tensor({4}, gen, DType::kF32, 0, 9);
  std::string data = (dir / "data.safetensors").string();
  write_safetensors(data, {{"images", images}, {"labels", labels}});
  EXPECT_TRUE(bad_input(std::string(kTiny) + " --data " + data, "labels"));
}

// Throughput counts the images the steps took: a file of 6 samples in batches of 4 gives batches
// of 4 and 2 (the epoch's last one short), 12 images in 4 steps, not 16.
TEST(TrainCli, ImagesPerSecondCountsShortBatches) {
  auto dir = temp_dir();
  Generator gen(5);
  std::vector<double> label_values = {0, 1, 2, 3, 4, 5};
  std::string data = (dir / "six.safetensors").string();
  write_safetensors(data, {{"images", testing::random_tensor({6, 3, 32, 32}, gen, DType::kF32)},
                           {"labels", Tensor::from_vector(label_values, {6}, DType::kI64)}});
  ProcessResult r = train("--model vit_tiny --steps 4 --batch-size 4 --set workers=1 --set untimed-steps=0 --json --data " +
                          data);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = testing::json_line(r.out);
  EXPECT_NEAR(j["images_per_s"].get<double>() / j["steps_per_s"].get<double>(), 3.0, 1e-9) << r.out;
}

TEST(TrainCli, CpuRunPrintsProgressSummaryAndJson) {
  auto dir = temp_dir();
  std::string saved = (dir / "trained.safetensors").string();
  ProcessResult r = train("--steps 4 --batch-size 4 --json --save " + saved);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("no GPU visible; training on the CPU with the small vit_tiny model"), std::string::npos) << r.out;
  const nlohmann::json j = testing::json_line(r.out);
  EXPECT_EQ(j["system"], "vitddp");
  EXPECT_EQ(j["model"], "vit_tiny");
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["losses"].size(), 4u);
  // One progress line per step (--print-every 1 by default), each with the step's loss.
  size_t progress = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);)
    progress += line.rfind("step ", 0) == 0 && line.find("/4") != std::string::npos &&
                line.find("  loss ") != std::string::npos;
  EXPECT_EQ(progress, j["losses"].size()) << r.out;
  // --steps counts every step; the timing leaves out the first ones, but at least one is timed.
  EXPECT_EQ(j["steps"], 4);
  EXPECT_EQ(j["timed_steps"], 1);
  EXPECT_EQ(j["untimed_steps"], 3);
  EXPECT_GT(j["steps_per_s"].get<double>(), 0.0);
  // The program chose the loader's threads and said why.
  ASSERT_EQ(j["chosen"].size(), 1u) << r.out;
  EXPECT_EQ(j["chosen"][0]["key"], "workers");
  EXPECT_FALSE(j["chosen"][0]["why"].get<std::string>().empty());
  // Utilisation: the model's FLOPs per image and the rate they make; no peak (and no MFU) for a CPU.
  EXPECT_NEAR(j["train_gflop_per_image"].get<double>(), vit_config_by_name("vit_tiny").training_flops_per_image() / 1e9,
              1e-9);
  EXPECT_NEAR(j["achieved_tflops_per_gpu"].get<double>(),
              j["images_per_s"].get<double>() * j["train_gflop_per_image"].get<double>() / 1e3, 1e-9);
  EXPECT_TRUE(j["mfu_pct"].is_null());
  EXPECT_NE(r.out.find("TFLOP/s per process"), std::string::npos) << r.out;
  // The saved weights load back into the same model by name, and differ from the init.
  SafetensorsFile file = read_safetensors(saved);
  VisionTransformer fresh(vit_config_by_name("vit_tiny"), 0);
  NamedTensors params = fresh.named_parameters();
  std::vector<double> before = params[0].second.to_vector();
  load_named_tensors(file, params, saved);
  EXPECT_EQ(file.tensors.size(), params.size());
  EXPECT_NE(params[0].second.to_vector(), before);
  // --init-from the saved file continues from the trained weights: its first loss is not a fresh
  // model's on the same batch.
  ProcessResult again = train(std::string(kTiny) + " --json --init-from " + saved);
  ProcessResult plain = train(std::string(kTiny) + " --json");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(testing::json_line(again.out)["losses"][0], testing::json_line(plain.out)["losses"][0]);
}

}  // namespace
}  // namespace vitddp
