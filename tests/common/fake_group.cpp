#include "common/fake_group.h"

#include <algorithm>

namespace vitddp::testing {
namespace {
class DoneWork final : public Work {
 public:
  void wait() override {}
  bool done() override { return true; }
};

// `in` reduced with the other rank's 2x, into `out`.
void reduce_with_twice(const Tensor& in, const Tensor& out, ReduceOp op) {
  Tensor host = in.to(Device::cpu()).to(DType::kF64);
  double* p = host.data<double>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    if (op == ReduceOp::kMin)
      p[i] = std::min(p[i], 2 * p[i]);
    else
      p[i] *= op == ReduceOp::kAvg ? 1.5 : 3.0;
  }
  Tensor(out).copy_(host);
}
}  // namespace

std::shared_ptr<Work> FakeGroup::allreduce(const Tensor& t, ReduceOp op) {
  calls.push_back(t.numel());
  reduce_with_twice(t, t, op);
  return std::make_shared<DoneWork>();
}

std::shared_ptr<Work> FakeGroup::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  reduce_with_twice(in.as_strided({out.numel()}, {1}, in.storage_offset()), out, op);  // rank 0's part
  return std::make_shared<DoneWork>();
}

std::shared_ptr<Work> FakeGroup::broadcast(const Tensor&, int) { return std::make_shared<DoneWork>(); }

std::shared_ptr<Work> FakeGroup::allgather(const Tensor& in, const Tensor& out) {
  for (int r = 0; r < size(); ++r)
    out.as_strided(in.shape(), contiguous_strides(in.shape()), out.storage_offset() + r * in.numel()).copy_(in);
  return std::make_shared<DoneWork>();
}

}  // namespace vitddp::testing
