// Iteration over strided N-d index spaces on the CPU: the one loop every layout-agnostic CPU
// kernel (copy, fill, broadcast arithmetic) is written on.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/core/shape.h"

namespace vitddp {

// Calls fn(offset_0, ..., offset_{K-1}) for every index of `shape` in row-major order, where
// offset_k = sum_d index[d] * strides[k][d]. K is 1, 2 or 3.
template <size_t K, typename Fn>
void strided_for_each(const Shape& shape, const std::vector<int64_t> (&strides)[K], Fn&& fn) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t total = 1;
  for (int64_t d : shape) total *= d;
  if (total == 0) return;
  std::vector<int64_t> index(rank, 0);
  int64_t off[K] = {};
  const int64_t inner = rank ? shape[rank - 1] : 1;
  int64_t inner_stride[K];
  for (size_t k = 0; k < K; ++k) inner_stride[k] = rank ? strides[k][rank - 1] : 0;
  for (int64_t done = 0; done < total; done += inner) {
    int64_t o[K];
    for (size_t k = 0; k < K; ++k) o[k] = off[k];
    for (int64_t i = 0; i < inner; ++i) {
      if constexpr (K == 1) fn(o[0]);
      if constexpr (K == 2) fn(o[0], o[1]);
      if constexpr (K == 3) fn(o[0], o[1], o[2]);
      for (size_t k = 0; k < K; ++k) o[k] += inner_stride[k];
    }
    // advance the outer index (all dims but the last)
    for (int64_t d = rank - 2; d >= 0; --d) {
      ++index[d];
      for (size_t k = 0; k < K; ++k) off[k] += strides[k][d];
      if (index[d] < shape[d]) break;
      for (size_t k = 0; k < K; ++k) off[k] -= strides[k][d] * shape[d];
      index[d] = 0;
    }
  }
}

}  // namespace vitddp
