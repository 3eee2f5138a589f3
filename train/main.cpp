// `train`: parses the configuration, runs training, and turns every failure into one line on
// stderr and a distinct exit code (train/exit_codes.h). Subcommands: `train bench --sweep`,
// `train bench allreduce ...`, `train bench loader ...` and `train bench transfer ...` (train/bench/), `train topology`
// (train/bench/topology.h).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>

#include "distributed/launcher.h"
#include "framework/core/thread_stacks.h"
#include "train/bench/allreduce_bench.h"
#include "train/bench/bench_command.h"
#include "train/bench/loader_bench.h"
#include "train/bench/transfer_bench.h"
#include "train/checkpoint/checkpoint.h"
#include "train/config.h"
#include "train/exit_codes.h"
#include "train/bench/topology.h"
#include "train/observe/trace.h"
#include "train/run_setup.h"
#include "train/trainer.h"

namespace {

// "rank R: " for an error line, from whichever launcher's variable is set; "" for no rank.
std::string rank_prefix() {
  const std::string rank = vitddp::rank_as_set_in_environment();
  return rank.empty() ? "" : "rank " + rank + ": ";
}

// After a failure a rank's other threads (Gloo's, the loader's workers, a lost peer's pending
// work) may still run: the libraries' static destructors (cuBLAS's) racing them crashed such a
// rank at exit, turning its exit code into a crash's. The failure is said by now; the process
// ends with its code at once, its output flushed.
[[noreturn]] void exit_after_failure(int code) {
  std::cout.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace vitddp;
  try {
    // Subcommands; anything else is a training run.
    if (argc > 2 && std::strcmp(argv[1], "bench") == 0 && std::strcmp(argv[2], "allreduce") == 0)
      return bench::run_bench_allreduce(argc, argv);
    if (argc > 2 && std::strcmp(argv[1], "bench") == 0 && std::strcmp(argv[2], "loader") == 0)
      return bench::run_bench_loader(argc, argv);
    if (argc > 2 && std::strcmp(argv[1], "bench") == 0 && std::strcmp(argv[2], "transfer") == 0)
      return bench::run_bench_transfer(argc, argv);
    if (argc > 1 && std::strcmp(argv[1], "bench") == 0) return bench::run_bench_command(argc, argv);
    if (argc > 1 && std::strcmp(argv[1], "topology") == 0) return run_topology(argc, argv);
    TrainConfig config;
    if (!parse_train_config(argc, argv, &config)) return kExitOk;
    if (!config.trace.empty()) check_trace_path(config.trace);  // before anything runs
    RankEnvironment env = read_rank_environment();
    // Where the run writes (--save, --checkpoint-dir): checked before any step, not at the end.
    // check_trace_path serves any output file; only rank 0 writes --save, so only it tries.
    if (!config.save.empty() && (!env.distributed || env.rank == 0)) check_trace_path(config.save, "--save");
    const int processes = std::max(config.gpus, config.procs);
    // The launcher (the same command line once per rank), or a check of this rank's place.
    Placement placement;
    placement.processes = processes;
    placement.flag = config.gpus > 0 ? "--gpus" : "--procs";
    placement.nnodes = config.nnodes;
    placement.node_rank = config.node_rank;
    placement.rendezvous = config.rendezvous;
    placement.max_restarts = config.max_restarts;
    placement.memory_checkpoints = config.max_restarts > 0;
    placement.join_timeout_seconds = config.join_timeout;
    placement.timeout_seconds = config.timeout;
    // A lost host's replacement joins the run's checkpoints: they are its to resume.
    if (!config.checkpoint_dir.empty())
      check_checkpoint_dir(config.checkpoint_dir,
                           config.resume || (!env.distributed && joins_a_run_in_progress(placement)));
    // Fail here, once, if the GPUs are missing, before the launcher starts the ranks.
    if (!env.distributed && config.gpus > 1) resolve_run(config, env, std::cout);
    if (std::optional<int> code = launch_if_needed(placement, argc, argv, env, std::cerr)) return *code;
    // `kill -USR2 <rank's pid>` prints every thread's stack of that rank and lets it run on (a
    // hang's first evidence where no debugger can attach).
    dump_thread_stacks_on_sigusr2();
    RunResult result = run_training(config, env, std::cout);
    if (config.json && env.rank == 0) std::cout << result.to_json().dump() << std::endl;
    return kExitOk;
  } catch (const Error& e) {
    // One write: every rank and the launcher print to the same terminal at the same moment.
    std::cerr << "train: " + rank_prefix() + "error: " + e.what() + "\n" << std::flush;
    exit_after_failure(exit_code_for(e.kind()));
  } catch (const std::bad_alloc&) {
    std::cerr << "train: " + rank_prefix() + "error: out of host memory\n" << std::flush;
    exit_after_failure(kExitInternal);
  } catch (const std::exception& e) {
    std::cerr << "train: internal error: " + std::string(e.what()) + "\n" << std::flush;
    exit_after_failure(kExitInternal);
  }
}
