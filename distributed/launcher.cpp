#include "distributed/launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <utility>
#include <thread>

#include "distributed/file_store.h"
#include "distributed/node_liveness.h"
#include "framework/core/error.h"
#if VITDDP_WITH_LIBFABRIC
#include "distributed/transfer/buddy_replicas.h"
#endif

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

// Note [Stopping every node]
// A launcher sees only its own ranks. When one of them fails first, it writes
// "launcher.failed.<attempt>.<node>" into the launchers' store: the code, then the line that
// names the rank. Every launcher looks for the other nodes' keys while it waits; the first it
// finds stops its ranks (SIGTERM, then SIGKILL after the failure grace) and becomes its exit code
// and message, unless one of its own ranks failed first. A node's ranks that only followed (a
// dead peer, exit 3, or the launcher's own signal) are never the cause.
//
// Note [Elastic restarts]
// With --max-restarts K, a failed attempt (not a signal the user sent) is followed by the next,
// up to K times: every launcher stops its ranks, as above, and starts them again with
// VITDDP_RESTART=<attempt>, the failure's wall-clock time (VITDDP_FAILURE_TIME, for the
// recovery time the ranks report) and --resume, in a fresh store folder (attempt-<a>), so the
// new ranks meet only each other. They restore the newest state every rank has (train/
// checkpoint/run_state.h), from memory or disk. The launchers need not agree on anything but the
// attempt number, which each derives from the failures it has seen. When the budget is spent
// the run ends with the first failure's code and line.
// (Note [A lost host] in distributed/node_liveness.cpp: a host lost whole, and its replacement.)
namespace {

constexpr int kPeerFailure = 3;  // train/exit_codes.h: a rank that lost a peer
constexpr int kLostHostCode = 128 + SIGKILL;  // as for a rank killed

std::string failed_key(int attempt, int node) {
  return "launcher.failed." + std::to_string(attempt) + "." + std::to_string(node);
}

struct Failure {
  int code = 0;
  std::string line;  // "rank R (node K) exited with status S"
};

// The first failure another node reported in `attempt`, or nullopt.
std::optional<Failure> remote_failure(const FileStore& store, int attempt, int nnodes, int self) {
  for (int node = 0; node < nnodes; ++node) {
    if (node == self || !store.has(failed_key(attempt, node))) continue;
    const std::string v = store.get(failed_key(attempt, node), std::chrono::milliseconds(1000));
    const size_t nl = v.find('\n');
    int code = 1;
    if (nl == std::string::npos || !parse_int(v.substr(0, nl).c_str(), &code) || code == 0) code = 1;
    return Failure{code, nl == std::string::npos ? v : v.substr(nl + 1)};
  }
  return std::nullopt;
}

// "rank 3 (node 1)" on several nodes, "rank 3" on one.
std::string rank_name(int rank, const LaunchOptions& o) {
  return "rank " + std::to_string(rank) + (o.nnodes > 1 ? " (node " + std::to_string(o.node_rank) + ")" : "");
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// One attempt's ranks on this node.
struct Attempt {
  int number = 0;
  std::string store_folder;    // the ranks' VITDDP_RENDEZVOUS
  double failure_time = 0;     // the failure that led to this attempt (wall clock); 0 for the first
  std::vector<std::string> argv;
  std::string memory_folder;   // LaunchOptions::memory_checkpoints; empty: none
};

struct AttemptEnd {
  int code = 0;                // 0: every rank exited 0
  Failure cause;               // the failure that ended it (this node's or another's)
  bool signalled = false;      // the user's SIGINT/SIGTERM was forwarded
  double failure_time = 0;     // when this launcher learnt of the failure
};

AttemptEnd run_attempt(const LaunchOptions& options, const char* self, FileStore& store, const Attempt& attempt,
                       std::ostream& log) {
  const int world = options.nnodes * options.processes;
  const int first_rank = options.node_rank * options.processes;
  std::vector<pid_t> pids;
  for (int local = 0; local < options.processes; ++local) {
    const int rank = first_rank + local;
    pid_t pid = fork();
    if (pid < 0) {  // the ranks already started would wait for the missing one until the timeout
      const int err = errno;
      for (pid_t started : pids) ::kill(started, SIGKILL);
      for (pid_t started : pids) ::waitpid(started, nullptr, 0);
      throw Error(detail::concat("launcher: cannot start rank ", rank, " of ", world, " (fork: ",
                                 std::strerror(err), "); the ", pids.size(), " started were stopped"));
    }
    if (pid == 0) {
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(options.processes).c_str(), 1);
      setenv("GROUP_RANK", std::to_string(options.node_rank).c_str(), 1);  // torchrun's name for the node
      setenv("VITDDP_RENDEZVOUS", attempt.store_folder.c_str(), 1);
      setenv("VITDDP_RESTART", std::to_string(attempt.number).c_str(), 1);
      if (attempt.failure_time > 0)
        setenv("VITDDP_FAILURE_TIME", std::to_string(attempt.failure_time).c_str(), 1);
      if (!attempt.memory_folder.empty()) setenv("VITDDP_MEMORY_CHECKPOINTS", attempt.memory_folder.c_str(), 1);
      setenv("NCCL_NVLS_ENABLE", "0", 0);  // multicast off unless the user says otherwise
      std::vector<char*> args;
      args.push_back(const_cast<char*>(self));
      for (size_t i = 1; i < attempt.argv.size(); ++i) args.push_back(const_cast<char*>(attempt.argv[i].c_str()));
      args.push_back(nullptr);
      execv(self, args.data());
      std::fprintf(stderr, "launcher: cannot start %s: %s\n", self, std::strerror(errno));
      _exit(127);
    }
    pids.push_back(pid);
  }

  AttemptEnd end;
  int first_failure = 0;
  int alive = options.processes;
  // Each rank's exit: the root cause is the first failure that is not a consequence of another
  // (a rank reporting a dead peer, or one the launcher stopped).
  struct Exit {
    int local;
    int code;
    std::string line;
  };
  std::vector<Exit> failures;
  std::optional<Failure> remote;  // another node's failure, when it came first
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
  auto stop_for_failure = [&] {
    end.failure_time = wall_seconds();
    stop_all(SIGTERM);
    stopping = true;
    deadline = std::min(deadline, std::chrono::steady_clock::now() + options.failure_grace);
  };
  auto next_remote_check = std::chrono::steady_clock::now();
  while (alive > 0) {
    int sig = g_forward_signal.exchange(0);
    if (sig) {
      stop_all(sig);  // forwarded: workers stop at a step boundary, save, and exit
      if (!stopping) deadline = std::chrono::steady_clock::now() + options.signal_grace;
      stopping = true;
      end.signalled = true;
    }
    if (options.nnodes > 1 && first_failure == 0 && !remote && std::chrono::steady_clock::now() >= next_remote_check) {
      next_remote_check = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
      remote = remote_failure(store, attempt.number, options.nnodes, options.node_rank);
      if (remote) {
        log << "launcher: node " + std::to_string(options.node_rank) + ": " + remote->line +
                   "; stopping this node's ranks\n";
        log.flush();
        stop_for_failure();
      }
    }
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      int local = -1;
      for (size_t i = 0; i < pids.size(); ++i)
        if (pids[i] == pid) {
          local = static_cast<int>(i);
          pids[i] = -1;
        }
      if (local < 0) continue;  // not a rank of this attempt
      --alive;
      int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (code != 0)
        failures.push_back({local, code,
                            rank_name(first_rank + local, options) + " " +
                                (WIFEXITED(status) ? "exited with status " + std::to_string(code)
                                                   : std::string("was killed by signal ") +
                                                         std::to_string(WTERMSIG(status)) + " (" +
                                                         strsignal(WTERMSIG(status)) + ")")});
      if (code != 0 && first_failure == 0 && !remote) {
        first_failure = code;
        // One write: the ranks print to the same terminal at the same moment.
        log << "launcher: " + failures.back().line + "; stopping the other ranks\n";
        log.flush();
        if (options.nnodes > 1 && code != kPeerFailure)
          store.set(failed_key(attempt.number, options.node_rank), std::to_string(code) + "\n" + failures.back().line);
        stop_for_failure();
      }
      continue;
    }
    if (stopping && std::chrono::steady_clock::now() > deadline) {
      stop_all(SIGKILL);
      deadline = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Ranks fail together when one dies; name the one that started it.
  for (const Exit& e : failures) {
    // A rank that died of the very signal the launcher sent it was stopped, not failing.
    if (e.code == kPeerFailure || (signal_sent[e.local] != 0 && e.code == 128 + signal_sent[e.local])) continue;
    if (remote) break;  // the other node's failure came first; this one followed
    if (&e != &failures.front()) log << "launcher: " + e.line + " (the first failure; the others followed)\n";
    if (options.nnodes > 1 && first_failure == kPeerFailure)
      store.set(failed_key(attempt.number, options.node_rank), std::to_string(e.code) + "\n" + e.line);
    end.code = e.code;
    end.cause = {e.code, e.line};
    return end;
  }
  if (remote) {
    end.code = remote->code;
    end.cause = *remote;
    return end;
  }
  if (first_failure != 0) {
    end.code = first_failure;
    end.cause = {first_failure, failures.empty() ? "" : failures.front().line};
    // Only followers here (a lost peer): another node may have said what failed meanwhile.
    if (options.nnodes > 1) {
      const auto give_up = std::chrono::steady_clock::now() + options.failure_grace;
      do {
        if (auto late = remote_failure(store, attempt.number, options.nnodes, options.node_rank)) {
          log << "launcher: node " + std::to_string(options.node_rank) + ": the first failure: " + late->line + "\n";
          end.code = late->code;
          end.cause = *late;
          return end;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      } while (std::chrono::steady_clock::now() < give_up);
    }
  }
  return end;
}


}  // namespace

int launch_workers(const LaunchOptions& given, std::ostream& log) {
  LaunchOptions options = given;
  VITDDP_CHECK(options.processes >= 1, "launcher: at least one process");
  VITDDP_CHECK(options.nnodes >= 1 && options.node_rank >= -1 && options.node_rank < options.nnodes,
               "launcher: node ", options.node_rank, " of ", options.nnodes);
  VITDDP_CHECK(options.nnodes == 1 || !options.rendezvous.empty(), "launcher: ", options.nnodes,
               " nodes need a --rendezvous folder they all reach");
  VITDDP_CHECK(options.max_restarts >= 0, "launcher: max_restarts must be >= 0");
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  VITDDP_CHECK(n > 0, "launcher: cannot find this program (/proc/self/exe)");
  self[n] = '\0';
  // One node without a folder given: a fresh temporary one, removed at the end. A given folder
  // is shared with the other nodes' launchers and stays.
  std::string rendezvous = options.rendezvous;
  const bool temporary = rendezvous.empty();
  if (temporary) {
    char pattern[] = "/tmp/vitddp-rendezvous-XXXXXX";
    VITDDP_CHECK(mkdtemp(pattern) != nullptr, "launcher: cannot create a rendezvous folder: ", std::strerror(errno));
    rendezvous = pattern;
  }
  const std::string store_folder = temporary ? rendezvous : rendezvous + "/store";
  struct RemoveTemporary {
    bool remove;
    std::string path;
    ~RemoveTemporary() {
      std::error_code ignored;
      if (remove) std::filesystem::remove_all(path, ignored);
    }
  } cleanup{temporary, rendezvous};
  FileStore store(store_folder);
  // Note [Node ranks by arrival]
  // A launcher without a node rank takes the lowest one no other launcher has claimed, as
  // torchrun's rendezvous does: no bit of the weights depends on which host holds which ranks.
  // The claim is atomic (FileStore::claim), so two launchers never share a place, and a folder
  // that served an earlier run, whose places are all taken, is refused rather than handing its
  // ranks that run's keys.
  auto claim = [&](int node) {
    return store.claim("launcher.node." + std::to_string(node), std::to_string(getpid()));
  };
  // A place already taken may be a lost node's, in a run with restarts (Note [A lost host]).
  std::optional<std::pair<int, int>> replacing;  // {node, the attempt it was lost in}
  auto lost_place = [&](const std::vector<int>& candidates) {
    if (options.nnodes > 1 && options.max_restarts > 0)
      replacing = liveness::take_lost_place(store, options.nnodes, candidates, log);
    if (replacing) options.node_rank = replacing->first;
    return replacing.has_value();
  };
  if (options.node_rank >= 0) {
    VITDDP_CHECK(claim(options.node_rank) || lost_place({options.node_rank}), "launcher: the rendezvous folder ",
                 rendezvous, " already served node ", options.node_rank, " of a run; give every run a fresh folder");
  } else {
    for (int node = 0; node < options.nnodes && options.node_rank < 0; ++node)
      if (claim(node)) options.node_rank = node;
    std::vector<int> every;
    for (int node = 0; node < options.nnodes; ++node) every.push_back(node);
    VITDDP_CHECK(options.node_rank >= 0 || lost_place(every), "launcher: the rendezvous folder ", rendezvous,
                 " already holds the ", options.nnodes, " nodes of a run; give every run a fresh folder");
    if (options.nnodes > 1 && !replacing)
      log << "launcher: node " << options.node_rank << " of " << options.nnodes << " (by arrival at " << rendezvous
          << ")\n";
  }
  std::optional<liveness::Heartbeat> heartbeat;
  if (options.nnodes > 1) heartbeat.emplace(store, options.node_rank);
  struct SayFinished {  // a run over: no later launcher takes a place in it
    FileStore& store;
    int node;
    bool several;
    ~SayFinished() {
      try {
        if (several) store.set(liveness::finished_key(node), "1");
      } catch (const Error&) {
      }
    }
  } say_finished{store, options.node_rank, options.nnodes > 1};

  struct sigaction action {};
  action.sa_handler = remember_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  Attempt attempt;
  attempt.argv = options.argv;
  if (options.memory_checkpoints) {
    const std::string base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    attempt.memory_folder = base + "/vitddp-memory-" + std::to_string(getpid()) + "-node" +
                            std::to_string(options.node_rank);
    std::error_code ec;
    std::filesystem::remove_all(attempt.memory_folder, ec);
    std::filesystem::create_directories(attempt.memory_folder, ec);
    VITDDP_CHECK(!ec, "launcher: cannot create the memory checkpoint folder ", attempt.memory_folder, ": ",
                 ec.message());
    std::string ranks;
    for (int local = 0; local < options.processes; ++local)
      ranks += std::to_string(options.node_rank * options.processes + local) + "\n";
    FILE* f = std::fopen((attempt.memory_folder + "/RANKS").c_str(), "w");
    VITDDP_CHECK(f && std::fputs(ranks.c_str(), f) >= 0 && std::fclose(f) == 0, "launcher: cannot write ",
                 attempt.memory_folder, "/RANKS");
  }
  const RemoveTemporary memory_cleanup{!attempt.memory_folder.empty(), attempt.memory_folder};
#if VITDDP_WITH_LIBFABRIC
  // Several nodes with memory checkpoints: each keeps its buddy's too.
  std::unique_ptr<transfer::BuddyReplicas> replicas;
  if (options.nnodes > 1 && !attempt.memory_folder.empty()) {
    transfer::BuddyReplicaOptions r;
    r.node = options.node_rank;
    r.nnodes = options.nnodes;
    r.memory_folder = attempt.memory_folder;
    const char* host = std::getenv("VITDDP_GLOO_HOST");
    r.host = host && *host ? host : "127.0.0.1";
    r.timeout = options.peer_timeout;
    try {
      replicas = std::make_unique<transfer::BuddyReplicas>(r, store, log);
    } catch (const Error& e) {
      log << "launcher: warning: no buddy replicas of the memory checkpoints (" + std::string(e.what()) +
                 "): a host lost whole restores from --checkpoint-dir\n";
    }
  }
#else
  if (options.nnodes > 1 && !attempt.memory_folder.empty())
    log << "launcher: warning: built without libfabric: no buddy replicas of the memory checkpoints; a host lost "
           "whole restores from --checkpoint-dir\n";
#endif
  Failure first;
  auto say_budget_spent = [&] {
    log << "launcher: the restart budget (--max-restarts " + std::to_string(options.max_restarts) +
               ") is spent; the first failure: " + first.line + "\n";
  };
  auto resume_from_now_on = [&] {
    if (std::find(attempt.argv.begin(), attempt.argv.end(), "--resume") == attempt.argv.end())
      attempt.argv.push_back("--resume");
  };
  if (replacing) {  // Note [A lost host]
    const int lost_in = replacing->second;
    first = {kLostHostCode, "node " + std::to_string(options.node_rank) + "'s host was lost in attempt " +
                                std::to_string(lost_in) + " (its launcher stopped)"};
    log << "launcher: node " + std::to_string(options.node_rank) + " of " + std::to_string(options.nnodes) +
               ": taking the place of the lost node " + std::to_string(options.node_rank) + "\n";
    log.flush();
    store.set(failed_key(lost_in, options.node_rank), std::to_string(first.code) + "\n" + first.line);
#if VITDDP_WITH_LIBFABRIC
    if (replicas) replicas->fetch_own_replica();
#endif
    const std::optional<double> failed_at = liveness::wait_for_every_node(
        store, options.nnodes, options.node_rank, lost_in, wall_seconds(), options.join_timeout, g_forward_signal, log);
    VITDDP_CHECK(failed_at, "launcher: the other nodes did not end attempt ", lost_in, " within the join timeout");
    if (lost_in >= options.max_restarts) {
      say_budget_spent();
      return first.code;
    }
    attempt.number = lost_in + 1;
    attempt.failure_time = *failed_at;
    resume_from_now_on();
  }
#if VITDDP_WITH_LIBFABRIC
  if (replicas) replicas->start();
#endif
  for (;;) {
    attempt.store_folder = store_folder + "/attempt-" + std::to_string(attempt.number);
    if (options.nnodes > 1) store.set(liveness::started_key(attempt.number, options.node_rank), "1");
    const AttemptEnd end = run_attempt(options, self, store, attempt, log);
    if (end.code == 0) return 0;
    if (first.code == 0) first = end.cause;
    // Bad input (exit 2) fails the same way again: no restart mends it.
    if (end.signalled || end.code == 2 || attempt.number >= options.max_restarts) {
      if (attempt.number > 0 && !end.signalled) say_budget_spent();
      return first.code != 0 ? first.code : end.code;
    }
    attempt.failure_time = end.failure_time > 0 ? end.failure_time : wall_seconds();
    if (options.nnodes > 1) {
      const std::optional<double> failed_at =
          liveness::wait_for_every_node(store, options.nnodes, options.node_rank, attempt.number, attempt.failure_time,
                                        options.join_timeout, g_forward_signal, log);
      if (!failed_at) {
        log << "launcher: no launcher took the lost node's place within the join timeout (" +
                   std::to_string(options.join_timeout.count()) + " s); the first failure: " + first.line + "\n";
        return first.code;
      }
      attempt.failure_time = *failed_at;
      // Only followers failed here (a lost peer): the cause may be another node's word by now.
      if (first.code == kPeerFailure)
        if (auto cause = remote_failure(store, attempt.number, options.nnodes, options.node_rank)) first = *cause;
    }
    ++attempt.number;
    log << "launcher: restarting the ranks (restart " + std::to_string(attempt.number) + " of " +
               std::to_string(options.max_restarts) + ")\n";
    log.flush();
    resume_from_now_on();
  }
}

bool joins_a_run_in_progress(const Placement& p) {
  if (p.nnodes <= 1 || p.max_restarts <= 0 || p.rendezvous.empty() ||
      !std::filesystem::is_directory(p.rendezvous + "/store"))
    return false;
  return liveness::newest_started_attempt(FileStore(p.rendezvous + "/store"), p.nnodes) >= 0;
}

void check_placement(const Placement& p) {
  VITDDP_CHECK(p.nnodes >= 1 && p.nnodes <= 1024, "--nnodes must be in [1, 1024], got ", p.nnodes);
  VITDDP_CHECK(p.nnodes > 1 || (p.node_rank <= 0 && p.rendezvous.empty()),
               "node-rank and --rendezvous are for several nodes (--nnodes > 1)");
  VITDDP_CHECK(p.node_rank >= -1 && p.node_rank < p.nnodes, "node-rank ", p.node_rank,
               " must be in [0, --nnodes ", p.nnodes, ") (-1: by arrival at --rendezvous)");
  VITDDP_CHECK(p.nnodes == 1 || !p.rendezvous.empty(), "--nnodes ", p.nnodes,
               " needs --rendezvous DIR: a folder every node reaches (fresh for each run)");
}

std::optional<int> launch_if_needed(const Placement& placement, int argc, char** argv, const RankEnvironment& env,
                                    std::ostream& log) {
  check_placement(placement);  // a rank sees the same flags: its place is in its variables
  if (!env.distributed && (placement.processes > 1 || placement.nnodes > 1 || placement.max_restarts > 0)) {
    LaunchOptions launch;
    launch.max_restarts = placement.max_restarts;
    launch.memory_checkpoints = placement.memory_checkpoints;
    launch.processes = std::max(1, placement.processes);
    launch.nnodes = placement.nnodes;
    launch.node_rank = placement.node_rank;
    launch.rendezvous = placement.rendezvous;
    launch.join_timeout = std::chrono::seconds(static_cast<int64_t>(placement.join_timeout_seconds));
    launch.peer_timeout = std::chrono::milliseconds(static_cast<int64_t>(placement.timeout_seconds * 1000));
    launch.argv.assign(argv, argv + argc);
    return launch_workers(launch, log);
  }
  if (env.distributed && placement.processes > 0)
    VITDDP_CHECK(env.local_rank < placement.processes, placement.flag, " ", placement.processes,
                 " per machine, but this rank's local rank is ", env.local_rank, " (", env.source, " variables)");
  return std::nullopt;
}

}  // namespace vitddp
