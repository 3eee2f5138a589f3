// Strided N-d indexing for CUDA kernels: a by-value descriptor of up to 8 dims that maps a
// linear (row-major) index to an element offset.
#pragma once

#include <cstdint>

#include "framework/core/tensor.h"

namespace vitddp::cuda {

struct StridedIndex {
  static constexpr int kMaxDims = 8;
  int rank = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  __host__ __device__ int64_t offset(int64_t linear) const {
    int64_t off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      int64_t i = linear % sizes[d];
      linear /= sizes[d];
      off += i * strides[d];
    }
    return off;
  }
};

inline StridedIndex make_strided_index(const Tensor& t) {
  VITDDP_CHECK(t.dim() <= StridedIndex::kMaxDims, "CUDA kernels take at most ", StridedIndex::kMaxDims,
               " dims, got ", t.description());
  StridedIndex s;
  s.rank = static_cast<int>(t.dim());
  for (int d = 0; d < s.rank; ++d) {
    s.sizes[d] = t.shape()[d];
    s.strides[d] = t.strides()[d];
  }
  return s;
}

}  // namespace vitddp::cuda
