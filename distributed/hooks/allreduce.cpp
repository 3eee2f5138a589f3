// The default hook: average the bucket across ranks in place.
#include "distributed/comm_hook.h"

namespace vitddp {
namespace {

class AllReduceHook final : public CommHook {
 public:
  std::string name() const override { return "allreduce"; }
  std::shared_ptr<Work> run(ProcessGroup& group, GradBucket& bucket) override {
    return group.allreduce(bucket.buffer, ReduceOp::kAvg);
  }
};

}  // namespace

std::unique_ptr<CommHook> make_allreduce_hook() { return std::make_unique<AllReduceHook>(); }

}  // namespace vitddp
