// Helpers for layout-agnostic CPU kernels built on strided_for_each: broadcast strides of a
// tensor against a larger shape, and dimension coalescing so the inner loop is as long as
// possible (a contiguous tensor becomes one flat loop).
#pragma once

#include <cstdint>
#include <vector>

#include "framework/core/tensor.h"

namespace vitddp::cpu {

// Strides of `t` viewed with shape `out_shape` under numpy broadcasting (right-aligned): 0 for
// leading dims `t` lacks and for size-1 dims of `t` that `out_shape` widens. The caller has
// checked that t's shape broadcasts to out_shape.
inline std::vector<int64_t> broadcast_strides(const Tensor& t, const Shape& out_shape) {
  const size_t rank = out_shape.size(), lead = rank - t.shape().size();
  std::vector<int64_t> strides(rank, 0);
  for (size_t d = lead; d < rank; ++d) {
    int64_t size = t.shape()[d - lead];
    strides[d] = (size == 1 && out_shape[d] != 1) ? 0 : t.strides()[d - lead];
  }
  return strides;
}

// Drops size-1 dims and merges adjacent dims that every operand walks as one (stride[d] ==
// stride[d+1] * shape[d+1] for all K). Leaves the iteration order (row-major) unchanged.
template <size_t K>
void coalesce_dims(Shape& shape, std::vector<int64_t> (&strides)[K]) {
  Shape new_shape;
  std::vector<int64_t> new_strides[K];
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !new_shape.empty();
    for (size_t k = 0; k < K && merge; ++k) merge = new_strides[k].back() == strides[k][d] * shape[d];
    if (merge) {
      new_shape.back() *= shape[d];
      for (size_t k = 0; k < K; ++k) new_strides[k].back() = strides[k][d];
    } else {
      new_shape.push_back(shape[d]);
      for (size_t k = 0; k < K; ++k) new_strides[k].push_back(strides[k][d]);
    }
  }
  shape = std::move(new_shape);
  for (size_t k = 0; k < K; ++k) strides[k] = std::move(new_strides[k]);
}

}  // namespace vitddp::cpu
