// Strided N-d indexing for CUDA kernels: a by-value descriptor of up to 8 dims that maps a
// linear (row-major) index to an element offset. The host side drops size-1 dims and merges
// dims that are contiguous with each other, so most tensors index with one or two dims, and
// plain contiguous tensors skip the arithmetic; 32-bit arithmetic is used when it suffices.
#pragma once

#include <cstdint>

#include "framework/core/tensor.h"

namespace vitddp::cuda {

struct StridedIndex {
  static constexpr int kMaxDims = 8;
  int rank = 0;
  bool contiguous = false;  // offset(i) == i
  bool small = false;       // every index and offset fits in 32 bits
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  __host__ __device__ int64_t offset(int64_t linear) const {
    if (contiguous) return linear;
    if (small) {
      uint32_t l = static_cast<uint32_t>(linear), off = 0;
      for (int d = rank - 1; d >= 0; --d) {
        uint32_t size = static_cast<uint32_t>(sizes[d]);
        off += (l % size) * static_cast<uint32_t>(strides[d]);
        l /= size;
      }
      return off;
    }
    int64_t off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      off += (linear % sizes[d]) * strides[d];
      linear /= sizes[d];
    }
    return off;
  }
};

// The index of a tensor with `shape` and `strides` (e.g. broadcast strides of 0).
inline StridedIndex make_strided_index(const Shape& shape, const Shape& strides) {
  VITDDP_CHECK(shape.size() <= 64, "CUDA kernels take at most 64 dims, got ", shape.size());
  StridedIndex s;
  int64_t merged_sizes[64], merged_strides[64];
  int rank = 0;
  int64_t numel = 1, max_offset = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    numel *= shape[d];
    if (shape[d] == 1) continue;
    max_offset += (shape[d] - 1) * (strides[d] < 0 ? -strides[d] : strides[d]);
    if (rank > 0 && merged_strides[rank - 1] == strides[d] * shape[d]) {
      merged_sizes[rank - 1] *= shape[d];
      merged_strides[rank - 1] = strides[d];
    } else {
      merged_sizes[rank] = shape[d];
      merged_strides[rank] = strides[d];
      ++rank;
    }
  }
  VITDDP_CHECK(rank <= StridedIndex::kMaxDims, "CUDA kernels take at most ", StridedIndex::kMaxDims,
               " non-mergeable dims, got shape ", shape_str(shape));
  s.rank = rank;
  for (int d = 0; d < rank; ++d) {
    s.sizes[d] = merged_sizes[d];
    s.strides[d] = merged_strides[d];
  }
  s.contiguous = rank == 0 || (rank == 1 && merged_strides[0] == 1);
  s.small = numel < (int64_t(1) << 31) && max_offset < (int64_t(1) << 31);
  return s;
}

inline StridedIndex make_strided_index(const Tensor& t) { return make_strided_index(t.shape(), t.strides()); }

}  // namespace vitddp::cuda
