// The launch shape PowerSGD's row passes share (the compensation fused with P = M Q, Note
// [PowerSGD's products as bucket passes]; the expansion, Note [The expansion's Q reads]): over a
// group of `count` matrices of n rows, blocks of kRowsBlockWarps warps, each warp two rows of
// one matrix.
#pragma once

#include <cstdint>

#include "framework/cuda/kernel_utils.cuh"

namespace vitddp::cuda {

constexpr int kRowsBlockWarps = 8;
constexpr int kRowsPerWarp = 2;
constexpr int kRowsPerBlock = kRowsBlockWarps * kRowsPerWarp;

inline int64_t row_pass_blocks(int64_t count, int64_t n) { return count * ((n + kRowsPerBlock - 1) / kRowsPerBlock); }

// This warp's rows: [first, first + rows) of matrix `matrix`; rows is 0 past a matrix's last row.
struct WarpRows {
  int64_t matrix, first;
  int rows;
};
__device__ __forceinline__ WarpRows warp_rows(int64_t n) {
  const int64_t blocks_per_matrix = (n + kRowsPerBlock - 1) / kRowsPerBlock;
  WarpRows w;
  w.matrix = blockIdx.x / blocks_per_matrix;
  w.first = (blockIdx.x % blocks_per_matrix) * kRowsPerBlock + (threadIdx.x / 32) * kRowsPerWarp;
  w.rows = w.first >= n ? 0 : (n - w.first < kRowsPerWarp ? static_cast<int>(n - w.first) : kRowsPerWarp);
  return w;
}

// The warp's rows of a factor laid out as P is (matrix k's n rows of kRank values back to back)
// into registers; a missing second row repeats the first, unused.
template <int kRank>
__device__ __forceinline__ void load_warp_factor_rows(const float* __restrict__ factor, int64_t n, const WarpRows& w,
                                                      float (&out)[kRowsPerWarp][kRank]) {
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i)
    load_factor_row<kRank>(factor + (w.matrix * n + w.first + (i < w.rows ? i : 0)) * kRank, out[i]);
}

}  // namespace vitddp::cuda
