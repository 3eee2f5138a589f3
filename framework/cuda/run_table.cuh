// A bucket's runs (BucketRuns, framework/cpu/low_rank.h) handed to kernels by value, up to
// kRunsPerLaunch a launch: PowerSGD's uncompressed tensors and the compensation outside its matrices.
#pragma once

#include <algorithm>
#include <cstdint>

#include "framework/cpu/low_rank.h"
#include "framework/cuda/kernel_utils.cuh"

namespace vitddp::cuda {

// The places of up to kRunsPerLaunch runs, by value: uploading them from pageable host memory
// could make the host wait for the stream (see orthogonalize.cu).
constexpr int kRunsPerLaunch = 96;  // 2.3 KB of arguments
struct RunTable {
  int64_t bucket_at[kRunsPerLaunch];
  int64_t flat_at[kRunsPerLaunch];
  int64_t numel[kRunsPerLaunch];
};

// Calls launch(table, runs_in_table, blocks_along_x) per chunk of kRunsPerLaunch runs.
template <typename Launch>
void for_run_tables(const BucketRuns& runs, Launch&& launch) {
  int64_t flat_at = 0;
  for (size_t first = 0; first < runs.offsets.size(); first += kRunsPerLaunch) {
    const size_t count = std::min<size_t>(kRunsPerLaunch, runs.offsets.size() - first);
    RunTable table{};
    int64_t longest = 0;
    for (size_t i = 0; i < count; ++i) {
      table.bucket_at[i] = runs.offsets[first + i];
      table.flat_at[i] = flat_at;
      table.numel[i] = runs.numels[first + i];
      flat_at += table.numel[i];
      longest = std::max(longest, table.numel[i]);
    }
    if (longest == 0) continue;
    const unsigned along = static_cast<unsigned>(std::min<int64_t>((longest + kThreads - 1) / kThreads, 64));
    launch(table, static_cast<unsigned>(count), along);
  }
}

}  // namespace vitddp::cuda
