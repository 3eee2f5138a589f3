// Checkpoints through `train`: N steps, stop, resume, M more give bit-identical weights to N+M
// uninterrupted steps (CPU; one process and 2 Gloo ranks with PowerSGD); SIGINT stops at a
// step boundary, saves and exits cleanly, also at the launcher of 2 ranks.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <chrono>
#include <filesystem>
#include <thread>

#include "common/multiprocess.h"
#include "common/run_checks.h"
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

std::vector<std::vector<double>> weights(const std::string& file) {
  std::vector<std::vector<double>> out;
  for (auto& [name, t] : read_safetensors(file).tensors) out.push_back(t.to_vector());
  return out;
}

// A run stopped after 3 steps and resumed with --steps 6, every other flag the default (the
// synthetic dataset's size does not follow --steps, so neither do its images): the weights of
// one uninterrupted run of 6 steps, byte for byte.
TEST(Resume, DefaultFlagsWithMoreStepsGiveTheUninterruptedWeights) {
  testing::expect_resume_with_more_steps("", 3, 6, "vitddp_resume_defaults");
}

// A fixed dataset size: the sampler's order must not depend on --steps.
const std::string kRun = "--model vit_tiny --batch-size 4 --set workers=2 --set dataset-size=64 --optimizer adamw "
                         "--lr 0.01 --dropout 0.1 --print-every 0";

// Returns the resumed run's output.
std::string check_exact_resume(const std::string& extra) {
  testing::TempFolder dir("vitddp_resume");
  const std::string straight = (dir / "straight.safetensors").string();
  const std::string resumed = (dir / "resumed.safetensors").string();
  const std::string ckpt = (dir / "ckpt").string();
  auto [a, out_a] = run(kRun + extra + " --steps 10 --save " + straight);
  EXPECT_EQ(a, 0) << out_a;
  auto [b, out_b] = run(kRun + extra + " --steps 6 --checkpoint-dir " + ckpt + " --checkpoint-every 3");
  EXPECT_EQ(b, 0) << out_b;
  auto [c, out_c] =
      run(kRun + extra + " --steps 10 --resume --checkpoint-dir " + ckpt + " --save " + resumed + " --json");
  EXPECT_EQ(c, 0) << out_c;
  if (a != 0 || b != 0 || c != 0) return out_c;
  // The resumed run trained steps 7 to 10 (4 of them), not --steps (10).
  const nlohmann::json j = testing::json_line(out_c);
  EXPECT_EQ(j["steps"], 4) << out_c;
  EXPECT_EQ(j["first_step"], 7) << out_c;
  EXPECT_EQ(j["losses"].size(), 4u) << out_c;
  EXPECT_EQ(weights(resumed), weights(straight)) << "resumed weights differ from the uninterrupted run";
  return out_c;
}

TEST(Resume, OneProcessIsBitExact) { check_exact_resume(""); }

// Kill every process of a 2-rank run in the middle of its step-4 save (the test hook pauses the
// save halfway): the step-2 checkpoint is whole, --resume continues from it, and the weights are
// those of the uninterrupted run, bit for bit.
TEST(Resume, KilledDuringASaveResumesFromThePreviousCheckpoint) {
  testing::TempFolder dir("vitddp_resume");
  const std::string straight = (dir / "straight.safetensors").string();
  const std::string resumed = (dir / "resumed.safetensors").string();
  const std::string ckpt = (dir / "ckpt").string();
  const std::string two = " --procs 2 --hook powersgd --powersgd-start-iter 1 --bucket-mb 0.05 --set timeout=60";
  auto [a, out_a] = run(kRun + two + " --steps 8 --save " + straight);
  ASSERT_EQ(a, 0) << out_a;
  testing::KilledOutcome k = testing::run_train_until(
      "VITDDP_TEST_PAUSE_IN_SAVE=step:4", kRun + two + " --steps 8 --checkpoint-dir " + ckpt + " --checkpoint-every 2",
      "VITDDP_TEST_PAUSE_IN_SAVE: paused");
  ASSERT_TRUE(k.killed) << k.out;
  EXPECT_TRUE(fs::exists(ckpt + "/step-000002/rank-1.json")) << k.out;
  EXPECT_FALSE(fs::exists(ckpt + "/step-000004/rank-0.json")) << "the step-4 save finished before the kill";
  auto [c, out_c] = run(kRun + two + " --steps 8 --resume --checkpoint-dir " + ckpt + " --save " + resumed + " --json");
  ASSERT_EQ(c, 0) << out_c;
  EXPECT_EQ(testing::json_line(out_c)["first_step"], 3) << out_c;  // resumed from the checkpoint of step 2
  EXPECT_EQ(weights(resumed), weights(straight)) << "resumed weights differ from the uninterrupted run";
}

TEST(Resume, TwoRanksWithPowerSgdAreBitExact) {
  const std::string out = check_exact_resume(" --procs 2 --hook powersgd --powersgd-start-iter 2 --bucket-mb 0.05");
  // The CPU's passes take every group: each compression settles its error a step late, and says so.
  EXPECT_NE(out.find("with the products as passes, "), std::string::npos) << out;
  EXPECT_NE(out.find(" with the error settled a step late"), std::string::npos) << out;
  EXPECT_EQ(out.find(", 0 with the error settled a step late"), std::string::npos) << out;
}

// Without bucket views the reducer rebuilds its buckets after the first step (vit_tiny's
// gradients arrive weight before bias); the checkpoint keeps the rebuilt buckets, so the resumed
// run's PowerSGD state lands in the buckets it was saved from.
TEST(Resume, RebuiltBucketsAndPowerSgdStateAreBitExact) {
  check_exact_resume(" --procs 2 --hook powersgd --powersgd-start-iter 2 --bucket-mb 0.05 --set grad-as-bucket-view=false");
}

// Starts `train args` with its output in `log`, sends SIGINT once the log shows step 3, and
// returns the exit status and the log.
std::pair<int, std::string> interrupt_after_step_3(const std::string& args, const std::string& log) {
  std::string cmd = "exec env CUDA_VISIBLE_DEVICES= " + std::string(VITDDP_TRAIN_BIN) + " " + args + " > " + log +
                    " 2>&1";
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  if (pid < 0) return {-1, "fork failed"};
  auto read_log = [&] {
    std::ifstream in(log);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  };
  // Wait for a few steps, then interrupt.
  for (int i = 0; i < 600; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (read_log().find("step    3/") != std::string::npos) break;
  }
  kill(pid, SIGINT);
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 1200 && !exited; ++i) {
    exited = waitpid(pid, &status, WNOHANG) == pid;
    if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!exited) {  // still running a minute after the signal
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return {-1, read_log() + "\n(test: killed, still running 60 s after SIGINT)"};
  }
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_log()};
}

// The step after which the run says it stopped, or -1.
int stopped_after(const std::string& text) {
  const std::string marker = "stopped by signal 2 after step ";
  const size_t at = text.find(marker);
  return at == std::string::npos ? -1 : std::stoi(text.substr(at + marker.size()));
}

// The stopped run's JSON (printed on an early stop too): stopped early, after `done` steps, all
// of them this run's.
void expect_stopped_after(const std::string& text, int done) {
  const nlohmann::json j = testing::json_line(text);
  EXPECT_EQ(j["stopped_early"], true) << text;
  EXPECT_EQ(j["first_step"], 1) << text;
  EXPECT_EQ(j["steps"], done) << text;
  EXPECT_EQ(j["losses"].size(), static_cast<size_t>(done)) << text;
}

// The run resumed from a stop after `done` steps with --steps done + 2: it starts at step
// done + 1 (from the stop's checkpoint), trains two steps and finishes.
void expect_resumed_two_steps_after(const std::string& out, int done) {
  const nlohmann::json j = testing::json_line(out);
  EXPECT_EQ(j["first_step"], done + 1) << out;
  EXPECT_EQ(j["steps"], 2) << out;
  EXPECT_EQ(j["losses"].size(), 2u) << out;
  EXPECT_EQ(j["stopped_early"], false) << out;
}

TEST(Resume, SigintStopsAtAStepBoundaryAndSaves) {
  testing::TempFolder dir("vitddp_resume");
  const std::string ckpt = (dir / "ckpt").string();
  auto [status, text] = interrupt_after_step_3(
      kRun + " --steps 100000 --print-every 1 --json --checkpoint-dir " + ckpt, (dir / "log").string());
  EXPECT_EQ(status, 0) << text;
  EXPECT_NE(text.find("checkpoint: "), std::string::npos) << text;
  const int done = stopped_after(text);
  ASSERT_GT(done, 0) << text;
  expect_stopped_after(text, done);
  // Continue for two more steps than were done: the resumed run trains exactly those two.
  auto [code, out] =
      run(kRun + " --steps " + std::to_string(done + 2) + " --resume --json --checkpoint-dir " + ckpt);
  EXPECT_EQ(code, 0) << out;
  expect_resumed_two_steps_after(out, done);
}

// SIGINT at the launcher of 2 Gloo ranks: it forwards the signal, both ranks stop after the same
// step (Note [Stopping on a signal] in train/trainer.cpp), both save that step, everything exits
// 0, and --resume continues from it.
TEST(Resume, SigintAtTheLauncherStopsBothRanksAfterTheSameStep) {
  testing::TempFolder dir("vitddp_resume");
  const std::string ckpt = (dir / "ckpt").string();
  const std::string ddp = " --procs 2 --hook powersgd --powersgd-start-iter 2 --bucket-mb 0.05";
  auto [status, text] = interrupt_after_step_3(
      kRun + ddp + " --steps 100000 --print-every 1 --set timeout=30 --json --checkpoint-dir " + ckpt,
      (dir / "log").string());
  EXPECT_EQ(status, 0) << text;
  EXPECT_EQ(text.find("launcher: rank"), std::string::npos) << text;  // no rank failed
  const int done = stopped_after(text);
  ASSERT_GT(done, 0) << text;
  expect_stopped_after(text, done);
  // Exactly one step folder, the stop step, whole for both ranks.
  std::vector<std::string> steps;
  for (const auto& entry : fs::directory_iterator(ckpt))
    if (entry.is_directory()) steps.push_back(entry.path().filename().string());
  char expected[32];
  std::snprintf(expected, sizeof expected, "step-%06d", done);
  EXPECT_EQ(steps, std::vector<std::string>{expected}) << text;
  for (const char* file : {"rank-0.json", "rank-0.safetensors", "rank-1.json", "rank-1.safetensors"})
    EXPECT_TRUE(fs::exists(fs::path(ckpt) / expected / file)) << file << "\n" << text;
  auto [code, out] =
      run(kRun + ddp + " --steps " + std::to_string(done + 2) + " --resume --json --checkpoint-dir " + ckpt);
  EXPECT_EQ(code, 0) << out;
  expect_resumed_two_steps_after(out, done);
}

TEST(Resume, BadCheckpointFlags) {
  auto [code, out] = run(kRun + " --steps 2 --resume");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("need --checkpoint-dir"), std::string::npos) << out;
}

}  // namespace
}  // namespace vitddp
