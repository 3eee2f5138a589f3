#include "distributed/launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <thread>

#include "framework/core/error.h"

namespace vitddp {
namespace {

bool parse_int(const char* text, int* out) {
  if (!text || !*text) return false;
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (*end != '\0' || v < 0 || v > INT_MAX) return false;
  *out = static_cast<int>(v);
  return true;
}

int env_int(const char* name) {
  const char* text = std::getenv(name);
  int v = 0;
  VITDDP_CHECK(parse_int(text, &v), "environment variable ", name, "='", text ? text : "",
               "' is not a non-negative integer");
  return v;
}

// The launchers' variables, in the order they are looked up: rank, local rank, world size, the
// name of the set, and the ranks on this machine (none for srun, whose count may be a list).
constexpr const char* kRankVariables[][5] = {
    {"RANK", "LOCAL_RANK", "WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM", ""}};

std::atomic<int> g_forward_signal{0};
void remember_signal(int sig) { g_forward_signal.store(sig); }

}  // namespace

std::string rank_as_set_in_environment() {
  for (const auto& vars : kRankVariables)
    if (const char* v = std::getenv(vars[0]); v && *v) return v;
  return "";
}

RankEnvironment read_rank_environment() {
  RankEnvironment env;
  for (const auto& vars : kRankVariables) {
    if (!std::getenv(vars[0]) && !std::getenv(vars[2])) continue;
    VITDDP_CHECK(std::getenv(vars[0]) && std::getenv(vars[2]), "environment: ", vars[0], " and ", vars[2],
                 " must be set together");
    env.distributed = true;
    env.source = vars[3];
    env.rank = env_int(vars[0]);
    env.world_size = env_int(vars[2]);
    env.local_rank_set = std::getenv(vars[1]) != nullptr;
    env.local_rank = env.local_rank_set ? env_int(vars[1]) : env.rank;
    if (*vars[4] && std::getenv(vars[4])) env.local_world_size = env_int(vars[4]);
    VITDDP_CHECK(env.world_size >= 1, "environment: ", vars[2], " must be >= 1");
    VITDDP_CHECK(env.rank < env.world_size, "environment: ", vars[0], "=", env.rank, " is not below ", vars[2], "=",
                 env.world_size);
    break;
  }
  if (const char* r = std::getenv("VITDDP_RENDEZVOUS")) env.rendezvous = r;
  if (env.distributed && env.world_size > 1)
    VITDDP_CHECK(!env.rendezvous.empty(), "environment: VITDDP_RENDEZVOUS must name a folder all ", env.world_size,
                 " ranks share (the file store for the rendezvous)");
  return env;
}

int launch_workers(const LaunchOptions& options, std::ostream& log) {
  VITDDP_CHECK(options.processes >= 1, "launcher: at least one process");
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  VITDDP_CHECK(n > 0, "launcher: cannot find this program (/proc/self/exe)");
  self[n] = '\0';
  char pattern[] = "/tmp/vitddp-rendezvous-XXXXXX";
  VITDDP_CHECK(mkdtemp(pattern) != nullptr, "launcher: cannot create a rendezvous folder: ", std::strerror(errno));
  const std::string rendezvous = pattern;

  struct sigaction action {};
  action.sa_handler = remember_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  std::vector<pid_t> pids;
  for (int rank = 0; rank < options.processes; ++rank) {
    pid_t pid = fork();
    if (pid < 0) {  // the ranks already started would wait for the missing one until the timeout
      const int err = errno;
      for (pid_t started : pids) ::kill(started, SIGKILL);
      for (pid_t started : pids) ::waitpid(started, nullptr, 0);
      std::error_code ignored;
      std::filesystem::remove_all(rendezvous, ignored);
      throw Error(detail::concat("launcher: cannot start rank ", rank, " of ", options.processes, " (fork: ",
                                 std::strerror(err), "); the ", pids.size(), " started were stopped"));
    }
    if (pid == 0) {
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(options.processes).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(options.processes).c_str(), 1);
      setenv("VITDDP_RENDEZVOUS", rendezvous.c_str(), 1);
      setenv("NCCL_NVLS_ENABLE", "0", 0);  // multicast off unless the user says otherwise
      std::vector<char*> args;
      args.push_back(self);
      for (size_t i = 1; i < options.argv.size(); ++i) args.push_back(const_cast<char*>(options.argv[i].c_str()));
      args.push_back(nullptr);
      execv(self, args.data());
      std::fprintf(stderr, "launcher: cannot start %s: %s\n", self, std::strerror(errno));
      _exit(127);
    }
    pids.push_back(pid);
  }

  int first_failure = 0;
  int alive = options.processes;
  // Each rank's exit: the root cause is the first failure that is not a consequence of another
  // (a rank reporting a dead peer, or one the launcher stopped).
  struct Exit {
    int rank;
    int code;
    std::string how;
  };
  std::vector<Exit> failures;
  std::vector<int> signal_sent(pids.size(), 0);  // the last signal the launcher sent each rank
  auto stop_all = [&](int sig) {
    for (size_t i = 0; i < pids.size(); ++i)
      if (pids[i] > 0) {
        kill(pids[i], sig);
        signal_sent[i] = sig;
      }
  };
  auto deadline = std::chrono::steady_clock::time_point::max();
  bool stopping = false;
  while (alive > 0) {
    int sig = g_forward_signal.exchange(0);
    if (sig) {
      stop_all(sig);  // forwarded: workers stop at a step boundary, save, and exit
      if (!stopping) deadline = std::chrono::steady_clock::now() + options.signal_grace;
      stopping = true;
    }
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      --alive;
      int rank = 0;
      for (size_t i = 0; i < pids.size(); ++i)
        if (pids[i] == pid) {
          rank = static_cast<int>(i);
          pids[i] = -1;
        }
      int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (code != 0)
        failures.push_back({rank, code, WIFEXITED(status) ? "exited with status " + std::to_string(code)
                                                          : std::string("was killed by signal ") +
                                                                std::to_string(WTERMSIG(status)) + " (" +
                                                                strsignal(WTERMSIG(status)) + ")"});
      if (code != 0 && first_failure == 0) {
        first_failure = code;
        // One write: the ranks print to the same terminal at the same moment.
        log << "launcher: rank " + std::to_string(rank) + " " + failures.back().how + "; stopping the other ranks\n";
        log.flush();
        stop_all(SIGTERM);
        stopping = true;
        deadline = std::min(deadline, std::chrono::steady_clock::now() + options.failure_grace);
      }
      continue;
    }
    if (stopping && std::chrono::steady_clock::now() > deadline) {
      stop_all(SIGKILL);
      deadline = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::error_code ignored;
  std::filesystem::remove_all(rendezvous, ignored);
  // Ranks fail together when one dies; name the one that started it.
  const int kPeerFailure = 3;
  for (const Exit& e : failures) {
    // A rank that died of the very signal the launcher sent it was stopped, not failing.
    if (e.code == kPeerFailure || (signal_sent[e.rank] != 0 && e.code == 128 + signal_sent[e.rank])) continue;
    if (&e != &failures.front())
      log << "launcher: rank " + std::to_string(e.rank) + " " + e.how + " (the first failure; the others followed)\n";
    return e.code;
  }
  return first_failure;
}

std::optional<int> launch_if_needed(int processes, const std::string& flag, int argc, char** argv,
                                    const RankEnvironment& env, std::ostream& log) {
  if (!env.distributed && processes > 1) {
    LaunchOptions launch;
    launch.processes = processes;
    launch.argv.assign(argv, argv + argc);
    return launch_workers(launch, log);
  }
  if (env.distributed && processes > 0)
    VITDDP_CHECK(env.local_rank < processes, flag, " ", processes, " per machine, but this rank's local rank is ",
                 env.local_rank, " (", env.source, " variables)");
  return std::nullopt;
}

}  // namespace vitddp
