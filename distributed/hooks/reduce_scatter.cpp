#include "distributed/hooks/reduce_scatter.h"

#include <vector>

#include "distributed/update/bucket_shard.h"

namespace vitddp {
namespace {

// The reduce-scatter of the equal parts and the all-reduce of the remainder, as one work.
class BothWork final : public Work {
 public:
  explicit BothWork(std::vector<std::shared_ptr<Work>> works) : works_(std::move(works)) {}
  void wait() override {
    for (auto& w : works_) w->wait();
  }
  bool done() override {
    for (auto& w : works_)
      if (!w->done()) return false;
    return true;
  }

 private:
  std::vector<std::shared_ptr<Work>> works_;
};

}  // namespace

std::shared_ptr<Work> ReduceScatterHook::run(ProcessGroup& group, GradBucket& bucket) {
  if (!scatter_) return group.allreduce(bucket.buffer, ReduceOp::kAvg);
  const BucketShard shard = bucket_shard(bucket.buffer.numel(), group.size());
  const int64_t offset = bucket.buffer.storage_offset();
  std::vector<std::shared_ptr<Work>> works;
  if (shard.part > 0) {
    const Tensor parts = bucket.buffer.as_strided({shard.rest_begin}, {1}, offset);
    const Tensor own = bucket.buffer.as_strided({shard.part}, {1}, offset + shard.own_begin(group.rank()));
    works.push_back(group.reduce_scatter(parts, own, ReduceOp::kAvg));
  }
  if (shard.has_rest())
    works.push_back(group.allreduce(
        bucket.buffer.as_strided({shard.numel - shard.rest_begin}, {1}, offset + shard.rest_begin), ReduceOp::kAvg));
  if (works.empty()) return group.allreduce(bucket.buffer, ReduceOp::kAvg);  // an empty bucket
  if (works.size() == 1) return works.front();
  return std::make_shared<BothWork>(std::move(works));
}

}  // namespace vitddp
