#include "common/guarded_tensor.h"

#include <vector>

namespace vitddp::testing {

Guarded guarded(const Shape& shape, DType dtype, int64_t guard_elements) {
  const int64_t numel = shape_numel(shape);
  Guarded g;
  g.all = Tensor::empty({numel + guard_elements}, dtype, Device::cuda(0));
  g.view = g.all.as_strided(shape, contiguous_strides(shape), 0);
  g.guard = g.all.as_strided({guard_elements}, {1}, numel);
  g.guard.fill_(kGuardValue);
  return g;
}

::testing::AssertionResult guard_intact(const std::string& what, const Guarded& g) {
  const std::vector<double> v = g.guard.to_vector();
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != kGuardValue)
      return ::testing::AssertionFailure() << what << ": guard element " << i << " past the output was overwritten ("
                                           << v[i] << ")";
  return ::testing::AssertionSuccess();
}

}  // namespace vitddp::testing
