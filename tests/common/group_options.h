// The process-group options the collective tests start from: rank `rank` of `world`, meeting in
// `folder` (a fresh rendezvous), every collective bounded by `timeout`.
#pragma once

#include <chrono>
#include <string>

#include "distributed/process_group.h"

namespace vitddp::testing {

inline ProcessGroupOptions group_options(int rank, int world, const std::string& folder,
                                         std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  ProcessGroupOptions o;
  o.rank = rank;
  o.world_size = world;
  o.rendezvous = folder;
  o.timeout = timeout;
  return o;
}

}  // namespace vitddp::testing
