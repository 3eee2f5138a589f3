// A process group of world size 2 inside one process, for testing reducers and hooks: the
// "other rank" always contributes twice this rank's tensor, so a sum is 3x and an average is
// 1.5x ours (closed-form expectations), and a minimum the smaller of x and 2x. Records the size of every all-reduce.
#pragma once

#include <vector>

#include "distributed/process_group.h"

namespace vitddp::testing {

class FakeGroup final : public ProcessGroup {
 public:
  FakeGroup() : ProcessGroup(0, 2) {}
  std::string backend() const override { return "fake"; }
  std::shared_ptr<Work> allreduce(const Tensor& t, ReduceOp op) override;
  std::shared_ptr<Work> broadcast(const Tensor& t, int root) override;
  std::shared_ptr<Work> allgather(const Tensor& in, const Tensor& out) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override;
  void barrier() override {}
  std::vector<int64_t> calls;  // numel of each all-reduce, in order
};

}  // namespace vitddp::testing
