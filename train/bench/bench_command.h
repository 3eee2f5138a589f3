// `train bench ...`: benchmarks driven by the train program itself.
//
//   train bench --sweep configs/sweeps/NAME.json [--out-dir DIR] [--reference SCRIPT.py]
//               [--run-timeout S] [--dry-run]
//
// checks the whole sweep file (train's own flag table and validation) before anything runs, then
// runs each configuration as a separate `train ... --json` (this executable), with the run's
// environment, stderr in DIR/NN-label.log and a wall-clock limit; a failed run becomes a failed
// row and the sweep goes on. With --reference (the PyTorch script, see train/bench/reference.h)
// and a python3 that imports torch, each configuration also runs there, as a "(pytorch)" row.
// The table goes to stdout and to DIR/NAME.{md,csv,json,svg} (train/bench/table.h).
#pragma once

namespace vitddp::bench {

// argv[1] is "bench". Returns the exit code (0 once the table is written, failed rows or not;
// 128 + N when signal N stopped the sweep); throws vitddp::Error on bad input, before any run.
int run_bench_command(int argc, char** argv);

}  // namespace vitddp::bench
