// Runs a test body on N ranks joined by a Gloo process group: one forked process per rank,
// meeting through a fresh rendezvous folder. Each body returns 0 for success (see
// multiprocess.h for why children report through exit codes); the exit codes are checked with
// EXPECT in the parent.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "distributed/process_group.h"

namespace vitddp::testing {

void run_on_gloo_ranks(int ranks, const std::string& name, const std::function<int(int rank, ProcessGroup&)>& body,
                       std::chrono::seconds timeout = std::chrono::seconds(60));
// The same with each rank's options adjusted first (`adjust` gets group_options' defaults).
void run_on_gloo_ranks(int ranks, const std::string& name, const std::function<void(ProcessGroupOptions&)>& adjust,
                       const std::function<int(int rank, ProcessGroup&)>& body,
                       std::chrono::seconds timeout = std::chrono::seconds(60));

}  // namespace vitddp::testing
