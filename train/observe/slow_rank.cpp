#include "train/observe/slow_rank.h"

#include <cstdio>
#include <cstdlib>

#include "framework/core/error.h"

namespace vitddp {

void apply_slow_rank_from_environment(ProcessGroupOptions& options) {
  const char* spec = std::getenv("VITDDP_SLOW_RANK");
  if (!spec) return;
  int rank = -1, reduce = -1;
  double seconds = 0;
  const int fields = std::sscanf(spec, "%d:%lf:%d", &rank, &seconds, &reduce);
  VITDDP_CHECK(fields >= 2 && rank >= 0 && seconds >= 0 && (fields == 2 || reduce >= 0),
               "VITDDP_SLOW_RANK must be RANK:SECONDS or RANK:SECONDS:REDUCE (e.g. 1:0.002 or 1:0.02:0), got '",
               spec, "'");
  if (rank != options.rank) return;
  options.ring_reduce_delay = std::chrono::duration<double>(seconds);
  options.ring_late_reduce = fields == 3 ? reduce : -1;
}

}  // namespace vitddp
