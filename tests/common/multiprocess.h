// Multi-process test helpers: run a body in N forked processes (one per rank) and collect their
// exit codes, with a timeout after which stragglers are killed. Children cannot report through
// gtest (their assertions die with them), so a body returns 0 for success and prints what went
// wrong otherwise; VITDDP_CHILD_CHECK does both in one line.
#pragma once

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "framework/core/error.h"

namespace vitddp::testing {

// Exit codes run_in_processes reports besides the body's own return value.
constexpr int kChildThrew = 125;     // the body threw (the child prints what())
constexpr int kChildTimedOut = -1;   // still running at the timeout: killed with SIGKILL
constexpr int kChildSignalBase = 128;  // 128 + N: ended by signal N

// Forks `n` children; child r runs body(r) and exits with its return value (through _exit, so
// no atexit handlers or gtest teardown run in the child). Children die with the parent
// (PR_SET_PDEATHSIG). The parent waits until all have exited or `timeout` has passed, kills the
// stragglers, and returns the exit codes by rank. Call it from the test's main thread before
// the test has started threads of its own. A child cannot use CUDA once the parent has
// initialised it (any CUDA call, device counting included): GPU tests use one thread per rank.
std::vector<int> run_in_processes(int n, const std::function<int(int rank)>& body, std::chrono::seconds timeout);

// "rank 0: 0, rank 1: 3 (...)": for failure messages.
std::string describe_exit_codes(const std::vector<int>& codes);

// A fresh empty folder under $TMPDIR (or /tmp), e.g. for a rendezvous; removed by the guard.
class TempFolder {
 public:
  explicit TempFolder(const std::string& prefix = "vitddp_test");
  ~TempFolder();
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
  const std::string& path() const { return path_; }
  // A path inside the folder: `folder / "file.json"`.
  std::filesystem::path operator/(const std::string& name) const { return std::filesystem::path(path_) / name; }

 private:
  std::string path_;
};

}  // namespace vitddp::testing

// In a child body: when `cond` fails, prints "rank R: <cond> failed at file:line: <message>"
// and returns 1 from the body. Needs a variable `rank` in scope.
#define VITDDP_CHILD_CHECK(cond, ...)                                                                     \
  do {                                                                                                    \
    if (!(cond)) {                                                                                        \
      std::fprintf(stderr, "rank %d: %s failed at %s:%d: %s\n", static_cast<int>(rank), #cond, __FILE__,  \
                   __LINE__, ::vitddp::detail::concat("", ##__VA_ARGS__).c_str());                        \
      std::fflush(stderr);                                                                                \
      return 1;                                                                                           \
    }                                                                                                     \
  } while (0)
