#include "common/multiprocess.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <sstream>
#include <thread>

namespace vitddp::testing {
namespace {

int decode_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return kChildSignalBase + WTERMSIG(status);
  return kChildThrew;
}

[[noreturn]] void run_child(int rank, const std::function<int(int)>& body, pid_t parent) {
  // Die with the parent; if it is already gone, the signal was never armed: leave now.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(kChildSignalBase + SIGKILL);
  int code = kChildThrew;
  try {
    code = body(rank);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: threw: %s\n", rank, e.what());
  } catch (...) {
    std::fprintf(stderr, "rank %d: threw a non-standard exception\n", rank);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(code);
}

}  // namespace

std::vector<int> run_in_processes(int n, const std::function<int(int rank)>& body, std::chrono::seconds timeout) {
  VITDDP_CHECK(n >= 1, "run_in_processes: need at least one process, got ", n);
  // Buffered output would otherwise be written once by the parent and once by every child.
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = ::getpid();
  std::vector<pid_t> pids(n, -1);
  std::vector<int> codes(n, kChildTimedOut);
  for (int rank = 0; rank < n; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) run_child(rank, body, parent);
    if (pid < 0) {
      std::string why = std::strerror(errno);
      for (int r = 0; r < rank; ++r) ::kill(pids[r], SIGKILL);
      for (int r = 0; r < rank; ++r) ::waitpid(pids[r], nullptr, 0);
      throw Error("run_in_processes: fork failed: " + why);
    }
    pids[rank] = pid;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int running = n;
  while (running > 0) {
    for (int rank = 0; rank < n; ++rank) {
      if (pids[rank] < 0) continue;
      int status = 0;
      pid_t got = ::waitpid(pids[rank], &status, WNOHANG);
      if (got == pids[rank]) {
        codes[rank] = decode_status(status);
        pids[rank] = -1;
        --running;
      }
    }
    if (running == 0) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      for (int rank = 0; rank < n; ++rank) {
        if (pids[rank] < 0) continue;
        std::fprintf(stderr, "run_in_processes: rank %d still running after %llds: killing it\n", rank,
                     static_cast<long long>(timeout.count()));
        ::kill(pids[rank], SIGKILL);
        ::waitpid(pids[rank], nullptr, 0);
        codes[rank] = kChildTimedOut;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return codes;
}

std::string describe_exit_codes(const std::vector<int>& codes) {
  std::ostringstream os;
  for (size_t r = 0; r < codes.size(); ++r) {
    if (r) os << ", ";
    os << "rank " << r << ": " << codes[r];
    if (codes[r] == kChildTimedOut) os << " (timed out, killed)";
    else if (codes[r] == kChildThrew) os << " (threw)";
    else if (codes[r] > kChildSignalBase) os << " (signal " << codes[r] - kChildSignalBase << ")";
  }
  return os.str();
}

TempFolder::TempFolder(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "_XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  VITDDP_CHECK(::mkdtemp(buffer.data()) != nullptr, "TempFolder: mkdtemp(", pattern, ") failed: ",
               std::strerror(errno));
  path_ = buffer.data();
}

TempFolder::~TempFolder() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace vitddp::testing
