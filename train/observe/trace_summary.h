// What --trace prints and puts in the JSON result: the run's analysis (train/observe/trace.h) reduced to
// means over the timed steps, per step phase, per rank and per bucket.
#pragma once

#include <iosfwd>
#include <string>

#include <nlohmann/json.hpp>

#include "train/observe/trace.h"

namespace vitddp {

// {"steps", "step_ms", "forward_ms", "backward_ms", "comm_ms", "exposed_comm_ms", "overlap_pct",
//  "slowest_rank", "ranks": [{rank, mean_step_ms, max_step_ms, mean_exposed_comm_ms}],
//  "buckets": [{index, bytes, ready_ms, start_ms, end_ms, comm_ms, waited_ms, GBps}]}:
// step figures are means over every (rank, step); buckets are rank 0's, averaged over its steps
// with the last step's bucket layout, times from the start of the step. Empty object when
// nothing was analysed.
nlohmann::json trace_summary(const RunStats& run);

// Human-readable lines of the same (one summary line, then the per-bucket table).
void print_trace_summary(const nlohmann::json& summary, const std::string& path, std::ostream& out);

}  // namespace vitddp
