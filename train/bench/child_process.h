// One program run to completion for a sweep: its stdout captured, its stderr in a log file, its
// environment this process's plus a few variables, and a wall-clock limit. The child leads its
// own process group, so the limit (and a stop request) reaches everything it started: the
// ranks under `train --gpus N`, torchrun's workers.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace vitddp::bench {

struct ChildOptions {
  std::vector<std::string> argv;  // argv[0] is looked up on PATH when it has no '/'
  std::vector<std::pair<std::string, std::string>> env;  // set on top of this process's environment
  std::string stderr_path;        // the child's stderr goes here (truncated first)
  std::chrono::seconds time_limit{900};
  // Between SIGTERM to the group (at the limit or on a stop request) and SIGKILL.
  std::chrono::seconds grace{10};
  // When it becomes non-zero (a signal handler sets it), the child is stopped as at the limit.
  const std::atomic<int>* stop_request = nullptr;
};

struct ChildResult {
  int exit_code = -1;     // exit status, or 128 + the signal that ended it
  bool timed_out = false;  // stopped at the time limit
  bool stopped = false;    // stopped on a stop request
  std::string out;         // all of stdout
  std::string last_error_line;  // the last non-empty line of stderr (at most 300 characters)
  double seconds = 0;
};

// Throws vitddp::Error when the log cannot be opened or the program cannot be started (its exit
// code is then 127 and the reason in the log).
ChildResult run_child(const ChildOptions& options);

// "NAME=value ... prog 'arg with space'": a command line a shell would run as it was.
std::string shell_command(const std::vector<std::pair<std::string, std::string>>& env,
                          const std::vector<std::string>& argv);

}  // namespace vitddp::bench
