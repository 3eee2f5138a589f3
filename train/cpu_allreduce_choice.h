// The expert key cpu-allreduce's names (train/config.h) to the process group's enum, once for
// train's options and the all-reduce bench.
#pragma once

#include <string>

#include "distributed/process_group.h"

namespace vitddp {

// `name` is one of cpu_allreduce_names(); anything else is an error naming the choices.
ProcessGroupOptions::CpuAllreduce cpu_allreduce_from_name(const std::string& name);

}  // namespace vitddp
