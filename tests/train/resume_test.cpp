// Checkpoints through `train`: N steps, stop, resume, M more give bit-identical weights to N+M
// uninterrupted steps (CPU; one process and 2 Gloo ranks with PowerSGD); SIGINT stops at a
// step boundary, saves and exits cleanly.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <array>
#include <fstream>
#include <chrono>
#include <filesystem>
#include <thread>

#include "common/test_utils.h"
#include "common/train_process.h"
#include "framework/io/safetensors.h"

namespace vitddp {
namespace {

namespace fs = std::filesystem;

std::pair<int, std::string> run(const std::string& args) {
  testing::TrainOutcome o = testing::run_train("", args);
  return {o.code, o.out};
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("vitddp_resume_" + std::to_string(::getpid()) + "_" +
                                               std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<std::vector<double>> weights(const std::string& file) {
  std::vector<std::vector<double>> out;
  for (auto& [name, t] : read_safetensors(file).tensors) out.push_back(t.to_vector());
  return out;
}

// A fixed dataset size: the sampler's order must not depend on --steps.
const std::string kRun = "--model vit_tiny --batch-size 4 --workers 2 --warmup 0 --dataset-size 64 --optimizer adamw "
                         "--lr 0.01 --dropout 0.1 --print-every 0";

void check_exact_resume(const std::string& extra) {
  TempDir dir;
  const std::string straight = (dir.path / "straight.safetensors").string();
  const std::string resumed = (dir.path / "resumed.safetensors").string();
  const std::string ckpt = (dir.path / "ckpt").string();
  auto [a, out_a] = run(kRun + extra + " --steps 10 --save " + straight);
  ASSERT_EQ(a, 0) << out_a;
  auto [b, out_b] = run(kRun + extra + " --steps 6 --checkpoint-dir " + ckpt + " --checkpoint-every 3");
  ASSERT_EQ(b, 0) << out_b;
  auto [c, out_c] = run(kRun + extra + " --steps 10 --resume --checkpoint-dir " + ckpt + " --save " + resumed);
  ASSERT_EQ(c, 0) << out_c;
  EXPECT_NE(out_c.find("resumed from"), std::string::npos) << out_c;
  EXPECT_NE(out_c.find("(step 6)"), std::string::npos) << out_c;
  EXPECT_EQ(weights(resumed), weights(straight)) << "resumed weights differ from the uninterrupted run";
}

TEST(Resume, OneProcessIsBitExact) { check_exact_resume(""); }

TEST(Resume, TwoRanksWithPowerSgdAreBitExact) {
  check_exact_resume(" --procs 2 --hook powersgd --powersgd-start-iter 2 --bucket-mb 0.05");
}

TEST(Resume, SigintStopsAtAStepBoundaryAndSaves) {
  TempDir dir;
  const std::string ckpt = (dir.path / "ckpt").string();
  const std::string log = (dir.path / "log").string();
  std::string cmd = "exec env CUDA_VISIBLE_DEVICES= " + std::string(VITDDP_TRAIN_BIN) + " " + kRun +
                    " --steps 100000 --print-every 1 --checkpoint-dir " + ckpt + " > " + log + " 2>&1";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait for a few steps, then interrupt.
  for (int i = 0; i < 300; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    if (text.find("step    3/") != std::string::npos) break;
  }
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  ASSERT_TRUE(WIFEXITED(status)) << text;
  EXPECT_EQ(WEXITSTATUS(status), 0) << text;
  EXPECT_NE(text.find("stopped by signal 2 after step"), std::string::npos) << text;
  EXPECT_NE(text.find("checkpoint: "), std::string::npos) << text;
  // Continue for two more steps than were done.
  const size_t at = text.find("stopped by signal 2 after step ");
  ASSERT_NE(at, std::string::npos);
  const int done = std::stoi(text.substr(at + 31));
  auto [code, out] = run(kRun + " --steps " + std::to_string(done + 2) + " --resume --checkpoint-dir " + ckpt);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("resumed from"), std::string::npos) << out;
}

TEST(Resume, BadCheckpointFlags) {
  auto [code, out] = run(kRun + " --steps 2 --resume");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("need --checkpoint-dir"), std::string::npos) << out;
}

}  // namespace
}  // namespace vitddp
