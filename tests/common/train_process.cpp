#include "common/train_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>

namespace vitddp::testing {

nlohmann::json json_line(const std::string& out) {
  nlohmann::json found;
  size_t start = 0;
  while (start < out.size()) {
    size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    if (out[start] == '{') {
      nlohmann::json line = nlohmann::json::parse(out.substr(start, end - start), nullptr, /*allow_exceptions=*/false);
      if (line.is_object()) found = std::move(line);
    }
    start = end + 1;
  }
  return found;
}

nlohmann::json TrainOutcome::json() const { return json_line(out); }

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

KilledOutcome run_train_until(const std::string& env, const std::string& args, const std::string& marker,
                              bool use_gpus, int timeout_s) {
  int fds[2];
  KilledOutcome o;
  if (::pipe(fds) != 0) return o;
  const std::string cmd = "exec env " + std::string(use_gpus ? "" : "CUDA_VISIBLE_DEVICES= ") + env + " timeout " +
                          std::to_string(timeout_s) + " " + VITDDP_TRAIN_BIN + " " + args + " 2>&1";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group: the launcher and every rank can be killed at once
    ::close(fds[0]);
    ::dup2(fds[1], 1);
    ::close(fds[1]);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    return o;
  }
  ::setpgid(pid, pid);
  std::array<char, 512> buf;
  ssize_t n;
  while ((n = ::read(fds[0], buf.data(), buf.size())) > 0) {
    o.out.append(buf.data(), static_cast<size_t>(n));
    if (o.out.find(marker) != std::string::npos) {
      ::kill(-pid, SIGKILL);
      o.killed = true;
      break;
    }
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return o;
}

}  // namespace vitddp::testing
