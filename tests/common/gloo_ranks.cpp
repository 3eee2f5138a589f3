#include "common/gloo_ranks.h"

#include <gtest/gtest.h>

#include "common/group_options.h"
#include "common/multiprocess.h"

namespace vitddp::testing {

void run_on_gloo_ranks(int ranks, const std::string& name, const std::function<int(int rank, ProcessGroup&)>& body,
                       std::chrono::seconds timeout) {
  run_on_gloo_ranks(ranks, name, [](ProcessGroupOptions&) {}, body, timeout);
}

void run_on_gloo_ranks(int ranks, const std::string& name, const std::function<void(ProcessGroupOptions&)>& adjust,
                       const std::function<int(int rank, ProcessGroup&)>& body, std::chrono::seconds timeout) {
  TempFolder folder("vitddp_" + name);
  const std::string path = folder.path();
  auto codes = run_in_processes(
      ranks,
      [&](int rank) {
        ProcessGroupOptions options = group_options(rank, ranks, path);
        adjust(options);
        auto group = make_gloo_process_group(options);
        return body(rank, *group);
      },
      timeout);
  EXPECT_EQ(codes, std::vector<int>(ranks, 0)) << name << ": " << describe_exit_codes(codes);
}

}  // namespace vitddp::testing
