// --op-breakdown: two more (untimed) steps after the timed ones, the host's issue time against
// the GPU's, and GPU time per op type (framework/cuda/op_profiler.h).
#pragma once

#include <functional>
#include <ostream>

#include <nlohmann/json.hpp>

#include "distributed/process_group.h"
#include "framework/core/tensor.h"

namespace vitddp {

// Two more (untimed) steps after the timed ones: one plain, from an idle GPU, timing the host
// against the GPU; one with the op profiler on. Prints both; returns time per op type. The run
// refused --op-breakdown off the GPU before its first step.
// `after_step()` runs after each of the two, once the GPU has finished it.
nlohmann::json op_breakdown(const std::function<Tensor()>& step, const std::function<void()>& after_step,
                            const ProcessGroup* group, std::ostream& out);

}  // namespace vitddp
