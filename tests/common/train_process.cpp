#include "common/train_process.h"

#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>

namespace vitddp::testing {

TrainOutcome run_train(const std::string& env, const std::string& args, bool use_gpus, int timeout_s) {
  const auto start = std::chrono::steady_clock::now();
  std::string cmd = std::string(use_gpus ? "" : "CUDA_VISIBLE_DEVICES= ") + env + " timeout " +
                    std::to_string(timeout_s) + " " + VITDDP_TRAIN_BIN + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  TrainOutcome o;
  std::array<char, 512> buf;
  while (pipe && fgets(buf.data(), buf.size(), pipe)) o.out += buf.data();
  const int status = pipe ? pclose(pipe) : -1;
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return o;
}

}  // namespace vitddp::testing
