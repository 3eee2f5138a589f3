// The hook of `update sharded` (Note [Sharded updates] in distributed/update/sharded.cpp). Off
// (the default) it is the all-reduce hook. Scattering, it breaks CommHook's promise on purpose:
// once its work is waited for only this rank's part of the bucket (bucket_shard) and the
// remainder hold the average; the other ranks' parts keep this rank's own gradients.
#pragma once

#include <memory>

#include "distributed/comm_hook.h"

namespace vitddp {

class ReduceScatterHook final : public CommHook {
 public:
  std::string name() const override { return "allreduce"; }
  std::shared_ptr<Work> run(ProcessGroup& group, GradBucket& bucket) override;
  // From the next run() on: reduce-scatter (true) or all-reduce (false) each bucket.
  void set_scatter(bool scatter) { scatter_ = scatter; }
  bool scatters() const { return scatter_; }

 private:
  bool scatter_ = false;
};

}  // namespace vitddp
