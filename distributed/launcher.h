// The launcher and the rank environment.
//
// `train --gpus N` (or `--procs N` on the CPU) with no rank environment becomes the launcher:
// it starts N copies of the same program, each with RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE and VITDDP_RENDEZVOUS (a fresh folder for the file store) set, forwards SIGINT/SIGTERM to them,
// and when one fails stops the others and exits non-zero naming the first failure. Under an
// existing launcher (torchrun-style variables, mpirun or srun) the program is a worker at once.
//
// Several hosts, as torchrun: one launcher per host with `--nnodes M --rendezvous DIR`, DIR a
// folder every host reaches (a shared file system; a fresh one per run). Each launcher takes
// the next free node rank K (Note [Node ranks by arrival]; the expert key node-rank fixes it);
// node K's ranks are K*N .. K*N + N - 1 of M*N; the ranks' file store is DIR/store. A launcher whose rank
// fails says so in the store, and every other launcher stops its own ranks and exits with that
// first failure's code, naming it (Note [Stopping every node]). With --max-restarts, a host lost
// whole is replaced by starting the same command on another (Note [A lost host] in
// distributed/node_liveness.cpp): it takes the lost node's place, gets that node's memory
// checkpoints back from its buddy (distributed/transfer/buddy_replicas.h), and the run goes on.
#pragma once

#include <chrono>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace vitddp {

struct RankEnvironment {
  bool distributed = false;  // a rank environment was found
  int rank = 0;
  int local_rank = 0;        // the rank when the launcher names no local rank
  bool local_rank_set = false;  // the launcher named it (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID)
  int world_size = 1;
  int local_world_size = 0;  // ranks on this machine when the launcher says (LOCAL_WORLD_SIZE, OMPI's); 0: unknown
  std::string rendezvous;    // VITDDP_RENDEZVOUS: folder for the file store
  std::string source;        // which variables: "RANK", "OMPI", "SLURM"
};

// Reads RANK/LOCAL_RANK/WORLD_SIZE, else OMPI_COMM_WORLD_*, else SLURM_PROCID/LOCALID/NTASKS.
// Throws (bad input) on malformed or inconsistent values, naming the variable.
RankEnvironment read_rank_environment();
// The rank's value as the first of those variables that is set holds it, unchecked (for error
// lines, which must not throw); "" when none is set.
std::string rank_as_set_in_environment();

struct LaunchOptions {
  int processes = 1;  // on this node
  int nnodes = 1;
  int node_rank = -1;      // -1: the lowest place no other launcher of the rendezvous has taken
  std::string rendezvous;  // the launchers' shared folder; empty (one node only): a fresh temporary one
  int max_restarts = 0;    // Note [Elastic restarts] in launcher.cpp
  // A folder in memory (/dev/shm) for the ranks' memory checkpoints, made by the launcher, named
  // to its ranks in VITDDP_MEMORY_CHECKPOINTS, and removed when the run ends: it outlives every
  // rank, so a restarted one finds its state there. Its RANKS file lists the ranks it holds.
  bool memory_checkpoints = false;
  std::vector<std::string> argv;  // the worker command line; argv[0] is replaced by this program
  // Between SIGTERM and SIGKILL: after a rank failed (the others are likely stuck in a
  // collective), and after forwarding the user's SIGINT/SIGTERM (ranks finish the step and save).
  std::chrono::seconds failure_grace{5};
  std::chrono::seconds signal_grace{120};
  // How long a restart waits for a lost node's place to be taken (the expert key join-timeout).
  std::chrono::seconds join_timeout{600};
  // How long a buddy may take to answer (the run's timeout).
  std::chrono::milliseconds peer_timeout{std::chrono::seconds(300)};
};

// Runs the workers to completion. Returns 0 when all exit 0; otherwise the first failed
// worker's exit code (128 + signal when killed), after printing one line naming it.
int launch_workers(const LaunchOptions& options, std::ostream& log);

// Where the ranks are: processes on this node (`--gpus`/`--procs`, 0 when neither was given)
// and the nodes (`--nnodes`, `--rendezvous`, the expert key node-rank).
struct Placement {
  int processes = 0;
  std::string flag = "--procs";  // which flag gave `processes`: "--gpus" or "--procs"
  int nnodes = 1;
  int node_rank = -1;  // -1: by arrival at the rendezvous
  std::string rendezvous;
  int max_restarts = 0;             // restarts need this node's launcher, even for one process
  bool memory_checkpoints = false;  // the launcher keeps a memory checkpoint folder for its ranks
  double join_timeout_seconds = 600;  // LaunchOptions::join_timeout
  double timeout_seconds = 300;       // the run's timeout: LaunchOptions::peer_timeout
};

// Whether this host's launcher joins a run already going on: several nodes with restarts, and a
// rendezvous whose nodes have started their ranks (a lost host's replacement, Note [A lost
// host]). Such a launcher's ranks go on from the run's state, as with --resume.
bool joins_a_run_in_progress(const Placement& placement);

// Checks the node flags together (one clear line on the first problem): node-rank below
// --nnodes, a --rendezvous folder for more than one node and none for one.
void check_placement(const Placement& placement);

// For a command that runs once per rank (`train`, `train bench allreduce`): without a rank
// environment and with more than one process or node asked for, starts this node's workers with
// this command line and returns their exit code (one process per node when several nodes are
// asked for without --gpus or --procs). Under a launcher it checks that the local rank is below
// `processes` (per machine). nullopt: this process does the work.
std::optional<int> launch_if_needed(const Placement& placement, int argc, char** argv, const RankEnvironment& env,
                                    std::ostream& log);

}  // namespace vitddp
