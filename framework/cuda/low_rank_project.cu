#include "framework/cpu/low_rank_project.h"

#include <type_traits>

#include "framework/cuda/check.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/op_profiler.h"
#include "framework/cuda/stream.h"
#include "framework/cuda/warp_rows.cuh"

namespace vitddp::cuda {
namespace {

// Note [PowerSGD's products as bucket passes]
// P = M Q and Q = M^T P at rank 4 (or 8) are matrix-vector products in all but name: each reads
// all of M for a few multiply-adds an element, and through cuBLASLt they read M well below the
// rate of a plain pass such as the compensation (docs/performance.md, "PowerSGD's products as
// passes of our own"). So:
// - P = M Q is fused into the compensation: a warp takes two rows of a matrix, its lanes walk
//   the columns in quads, write M = gradient + error and multiply the stored M by Q's rows
//   (through L1, shared by the block's warps and the two rows); one warp sum per row of P.
// - Q = M^T P: a block takes 512 columns and kChunkRows rows of one matrix, P's rows in shared
//   memory; a second launch adds the row blocks' partials in order (no atomics: a CUDA graph's
//   replay gives the eager step's bits).
// Both compute in f32 from M as stored, with Q and P in f32 (cuBLASLt's path rounds them to 16
// bits for a 16-bit M).
constexpr int kTransposedThreads = 128;                     // a quad of columns each
constexpr int kChunkRows = 128;  // rows a block of the Q product sums (64 and 256 ran slower)
// A group whose blocks of kChunkRows rows number fewer than this takes smaller row blocks (down
// to 16 rows): ViT-L's head (1000 x 1024) made only 16 blocks of 128 rows, each a chain of 128
// dependent loads. About two blocks per multiprocessor of an H200.
constexpr int64_t kFillBlocks = 256;
constexpr int kSmallestChunkRows = 16;

// Blocks a multiprocessor keeps: at rank 4, three (80 registers a thread) hold the subtraction's
// registers too without spilling (unbounded it took 96: two); four (64 registers) spill.
template <int kRank>
constexpr int kCompensateBlocksPerSm = kRank == 4 ? 3 : 2;

// A quad of both rows a lane per iteration, the loop unrolled by two. In place (--nonfinite
// stop: the error buffer becomes M) the error is read through the same unaliased pointer M is
// written through, so the compiler may still move the next quad's loads above this one's stores.
// kSubtract: the error is last step's M, from which the approximation then sent, S Q^T, is
// subtracted here (Note [The error settled a step late], distributed/hooks/powersgd.cpp): S's
// two rows in registers, Q's rows those read for P anyway.
template <typename T, typename E, int kRank, bool kInPlace, bool kSubtract>
__global__ void __launch_bounds__(kRowsBlockWarps * 32, kCompensateBlocksPerSm<kRank>)
    compensate_project_kernel(const T* __restrict__ grad, const E* __restrict__ error,
                              const float* __restrict__ sent_p, const float* __restrict__ q, int64_t n, int64_t m,
                              int64_t stride, E* __restrict__ mo, float* __restrict__ p) {
  const int lane = threadIdx.x % 32;
  const WarpRows w = warp_rows(n);
  if (w.rows == 0) return;
  const int64_t k = w.matrix, first = w.first;
  const int rows = w.rows;
  float sp[kRowsPerWarp][kRank];
  if constexpr (kSubtract) load_warp_factor_rows<kRank>(sent_p, n, w, sp);
  const float* qk = q + k * m * kRank;
  const int64_t base = k * stride + first * m;
  const T* gr = grad + base;
  const E* src = kInPlace ? mo + base : error + base;
  E* dst = mo + base;
  float acc[kRowsPerWarp][kRank] = {};
#pragma unroll 2
  for (int64_t jq = lane; jq < m / 4; jq += 32) {
    float g[kRowsPerWarp][4], e[kRowsPerWarp][4];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i)
      if (i < rows) {
        load_pack<4>(gr + i * m, jq, g[i]);
        load_pack<4>(src + i * m, jq, e[i]);
      }
    float qv[4][kRank];
#pragma unroll
    for (int c = 0; c < 4; ++c) load_factor_row<kRank>(qk + (jq * 4 + c) * kRank, qv[c]);
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i)
      if (i < rows) {
        float v[4];
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          float sent = 0.0f;
          if constexpr (kSubtract) {
#pragma unroll
            for (int t = 0; t < kRank; ++t) sent += sp[i][t] * qv[c][t];  // t ascending, as the expansion
          }
          v[c] = to_f(from_f<E>(g[i][c] + e[i][c] - sent));  // M as stored
        }
        store_pack<4>(dst + i * m, jq, v);
#pragma unroll
        for (int c = 0; c < 4; ++c)
#pragma unroll
          for (int t = 0; t < kRank; ++t) acc[i][t] += v[c] * qv[c][t];
      }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i)
#pragma unroll
    for (int t = 0; t < kRank; ++t) acc[i][t] = warp_sum(acc[i][t]);
  if (lane == 0)
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i)
      if (i < rows)
#pragma unroll
        for (int t = 0; t < kRank; ++t) p[(k * n + first + i) * kRank + t] = acc[i][t];
}

// partial[k][chunk][j][t] := sum over the chunk's rows i of M_k[i][j] P_k[i][t].
template <typename E, int kRank>
__global__ void __launch_bounds__(kTransposedThreads)
    project_transposed_partial_kernel(const E* __restrict__ mi, const float* __restrict__ p, int64_t n, int64_t m,
                                      int64_t stride, int chunk_rows, int64_t chunks, int64_t slabs,
                                      float* __restrict__ partial) {
  __shared__ float p_rows[kChunkRows * kRank];
  const int64_t slab = blockIdx.x % slabs, chunk = (blockIdx.x / slabs) % chunks, k = blockIdx.x / slabs / chunks;
  const int64_t row0 = chunk * chunk_rows;
  const int rows = n - row0 < chunk_rows ? static_cast<int>(n - row0) : chunk_rows;
  for (int t = threadIdx.x; t < rows * kRank; t += blockDim.x) p_rows[t] = p[(k * n + row0) * kRank + t];
  __syncthreads();
  const int64_t jq = slab * kTransposedThreads + threadIdx.x;
  if (jq >= m / 4) return;
  const E* col = mi + k * stride + row0 * m;
  float acc[4][kRank] = {};
#pragma unroll 8
  for (int i = 0; i < rows; ++i) {
    float v[4];
    load_pack<4>(col + i * m, jq, v);
#pragma unroll
    for (int t = 0; t < kRank; ++t) {
      const float pt = p_rows[i * kRank + t];
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[c][t] += v[c] * pt;  // i ascending within the chunk
    }
  }
  float* out = partial + ((k * chunks + chunk) * m + jq * 4) * kRank;
#pragma unroll
  for (int c = 0; c < 4; ++c)
#pragma unroll
    for (int t = 0; t < kRank; t += 4)
      reinterpret_cast<float4*>(out + c * kRank)[t / 4] =
          make_float4(acc[c][t], acc[c][t + 1], acc[c][t + 2], acc[c][t + 3]);
}

// q[k][j][t] := the sum of partial[k][chunk][j][t] over the chunks, in chunk order; a value a
// thread, the chunks' loads unrolled (they come from L2, written just before).
__global__ void sum_partials_kernel(const float* __restrict__ partial, int64_t count, int64_t chunks,
                                    int64_t per_matrix, float* __restrict__ q) {
  VITDDP_GRID_STRIDE_LOOP(x, count * per_matrix) {
    const int64_t k = x / per_matrix, within = x % per_matrix;
    const float* src = partial + k * chunks * per_matrix + within;
    float sum = 0.0f;
#pragma unroll 8
    for (int64_t c = 0; c < chunks; ++c) sum += src[c * per_matrix];
    q[k * per_matrix + within] = sum;
  }
}

bool aligned_at(const Tensor& t, int64_t offset) {
  return quad_aligned(static_cast<const char*>(t.data_ptr()) + offset * dtype_size(t.dtype()), dtype_size(t.dtype()));
}

void check_taken(const Tensor& grad, const Tensor& error, const Tensor& m, const Tensor& p, const Tensor& q,
                 const LowRankGroup& g, const char* op, const Tensor& sent_p = Tensor()) {
  check_projection(grad, error, m, p, q, g, op, sent_p);
  VITDDP_CHECK(grad.device().is_cuda(), op, ": cuda:: takes CUDA tensors, got ", grad.description());
  VITDDP_CHECK(projection_kernels_take(grad, error, m, p, q, g), op,
               ": the kernels take ranks 4 and 8 with rows of whole, aligned quads (rank ", g.rank, ", ", g.n, " x ",
               g.m, ", stride ", g.stride, ")");
}

}  // namespace

bool projection_kernels_take(const Tensor& grad, const Tensor& error, const Tensor& m, const Tensor& p,
                             const Tensor& q, const LowRankGroup& g) {
  if (g.rank != 4 && g.rank != 8) return false;
  if (g.m % 4 != 0 || g.stride % 4 != 0 || g.count < 1 || g.n < 1) return false;
  if (row_pass_blocks(g.count, g.n) > int64_t(0x7fffffff)) return false;
  if (g.count * ((g.n + kSmallestChunkRows - 1) / kSmallestChunkRows) *
          ((g.m / 4 + kTransposedThreads - 1) / kTransposedThreads) >
      int64_t(0x7fffffff))
    return false;
  for (const Tensor* t : {&grad, &error, &m})
    if (!t->defined() || !t->device().is_cuda() || !aligned_at(*t, g.offset)) return false;
  // P's and Q's rows are rank (a multiple of 4) apart: aligned once the first is.
  return aligned_at(p, g.p_offset) && aligned_at(q, g.q_offset);
}

void compensate_and_project(const Tensor& grad, const Tensor& error, const Tensor& sent_p, const Tensor& q,
                            const LowRankGroup& g, const Tensor& m, const Tensor& p) {
  check_taken(grad, error, m, p, q, g, "compensate_and_project", sent_p);
  if (sent_p.defined()) {
    VITDDP_CHECK(aligned_at(sent_p, g.p_offset), "compensate_and_project: the sent P's rows are not aligned to a quad");
    check_apart(sent_p, m, false, "the sent P and M overlap", "compensate_and_project");
  }
  check_apart(error, m, true, "the error and M overlap without being one buffer", "compensate_and_project");
  check_apart(grad, m, false, "the gradient and M overlap", "compensate_and_project");
  check_apart(p, q, false, "P and Q overlap", "compensate_and_project");
  OpScope scope("powersgd compensate");
  dispatch_bucket_and_error(grad.dtype(), m.dtype(), "compensate_and_project", [&](auto zero, auto error_zero) {
    using T = decltype(zero);
    using E = decltype(error_zero);
    const T* gr = static_cast<const T*>(grad.data_ptr()) + g.offset;
    const E* e = static_cast<const E*>(error.data_ptr()) + g.offset;
    E* mo = static_cast<E*>(m.data_ptr()) + g.offset;
    const float* qq = q.data<float>() + g.q_offset;
    float* pp = p.data<float>() + g.p_offset;
    const float* sp = sent_p.defined() ? sent_p.data<float>() + g.p_offset : nullptr;
    const unsigned blocks = static_cast<unsigned>(row_pass_blocks(g.count, g.n));
    const auto launch = [&](auto kernel) {
      kernel<<<blocks, kRowsBlockWarps * 32, 0, current_stream()>>>(gr, e, sp, qq, g.n, g.m, g.stride, mo, pp);
      CUDA_CHECK_LAUNCH();
    };
    // error and M are one buffer or apart (check_apart).
    const bool in_place = static_cast<const void*>(e) == static_cast<const void*>(mo);
    const auto launch_rank = [&](auto rank) {
      constexpr int r = decltype(rank)::value;
      if (sp)
        in_place ? launch(compensate_project_kernel<T, E, r, true, true>)
                 : launch(compensate_project_kernel<T, E, r, false, true>);
      else
        in_place ? launch(compensate_project_kernel<T, E, r, true, false>)
                 : launch(compensate_project_kernel<T, E, r, false, false>);
    };
    if (g.rank == 4)
      launch_rank(std::integral_constant<int, 4>());
    else
      launch_rank(std::integral_constant<int, 8>());
  });
}

void project_transposed(const Tensor& m, const Tensor& p, const LowRankGroup& g, const Tensor& q) {
  check_taken(m, m, m, p, q, g, "project_transposed");
  check_apart(p, q, false, "P and Q overlap", "project_transposed");
  OpScope scope("powersgd products");
  const int64_t slabs = (g.m / 4 + kTransposedThreads - 1) / kTransposedThreads;
  int chunk_rows = kChunkRows;
  while (chunk_rows > kSmallestChunkRows && g.count * ((g.n + chunk_rows - 1) / chunk_rows) * slabs < kFillBlocks)
    chunk_rows /= 2;
  const int64_t chunks = (g.n + chunk_rows - 1) / chunk_rows;
  const int64_t per_matrix = g.m * g.rank;
  // Freed on this stream when the call returns: stream-ordered, before anything later on it.
  Tensor partial = Tensor::empty({g.count * chunks * per_matrix}, DType::kF32, m.device());
  dispatch_floating(m.dtype(), "project_transposed", [&](auto zero) {
    using E = decltype(zero);
    const E* mi = static_cast<const E*>(m.data_ptr()) + g.offset;
    const float* pp = p.data<float>() + g.p_offset;
    const unsigned blocks = static_cast<unsigned>(g.count * chunks * slabs);
    const auto launch = [&](auto kernel) {
      kernel<<<blocks, kTransposedThreads, 0, current_stream()>>>(mi, pp, g.n, g.m, g.stride, chunk_rows, chunks,
                                                                 slabs, partial.data<float>());
      CUDA_CHECK_LAUNCH();
    };
    if (g.rank == 4)
      launch(project_transposed_partial_kernel<E, 4>);
    else
      launch(project_transposed_partial_kernel<E, 8>);
  });
  sum_partials_kernel<<<grid_for(g.count * per_matrix), kThreads, 0, current_stream()>>>(
      partial.data<float>(), g.count, chunks, per_matrix, q.data<float>() + g.q_offset);
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp::cuda
