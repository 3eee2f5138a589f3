// VITDDP_SLOW_RANK="RANK:SECONDS[:REDUCE]": a straggler on purpose, for the bypass ring's tests
// and benchmarks, as VITDDP_FAULT makes faults. That rank sleeps SECONDS before each reduce of
// the project's CPU rings (cpu-allreduce ring or bypass-ring), or only before its REDUCE-th
// (from 0) of each all-reduce: ring_sim's persistent and transient stragglers.
#pragma once

#include "distributed/process_group.h"

namespace vitddp {

// Sets options.ring_reduce_delay and ring_late_reduce for options.rank from the environment;
// a malformed value is a one-line error.
void apply_slow_rank_from_environment(ProcessGroupOptions& options);

}  // namespace vitddp
