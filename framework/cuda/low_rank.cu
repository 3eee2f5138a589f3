#include <algorithm>
#include <string>

#include "framework/cpu/low_rank.h"
#include "framework/cuda/check.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/op_profiler.h"
#include "framework/cuda/stream.h"
#include "framework/cuda/warp_rows.cuh"

namespace vitddp::cuda {
namespace {

// Streams both inputs once (bandwidth-bound: the whole bucket, every PowerSGD step); in quads
// where all three are aligned (a bucket and its error buffers always are). E, the error's and
// M's type: f32, or the bucket's own (--powersgd-error-dtype bucket).
template <typename T, typename E>
__global__ void add_widened_kernel(const T* g, const E* e, E* out, int64_t n) {
  VITDDP_GRID_STRIDE_LOOP(i, n) out[i] = from_f<E>(to_f(__ldcs(g + i)) + to_f(__ldcs(e + i)));
}
template <typename T, typename E>
__global__ void add_widened_quads_kernel(const T* g, const E* e, E* out, int64_t n) {
  const int64_t quads = n / 4;
  VITDDP_GRID_STRIDE_LOOP(k, quads) {
    float a[4], b[4];
    load_pack<4>(g, k, a);
    load_pack<4>(e, k, b);
#pragma unroll
    for (int t = 0; t < 4; ++t) a[t] += b[t];
    store_pack<4>(out, k, a);
  }
  VITDDP_GRID_STRIDE_LOOP_FROM(i, quads * 4, n) out[i] = from_f<E>(to_f(g[i]) + to_f(e[i]));
}

// One block per matrix row (k, i): P's row is read once per thread from L1, Q's rows stream
// past in j order, and the row of out (and of the residual) is written by consecutive threads.
// Quads: each thread takes four columns, when m and r are multiples of 4 and the row starts
// aligned in out, the residual and Q: Q's four rows of r values are read in 16-byte words
// (scalar reads of them, 64 bytes apart across a warp, made the pass slower than one column per
// thread). The general kernel: any rank; ranks 4 and 8 take expand_rows_kernel below. R: the
// residual's type (f32 or the bucket's).
template <typename T, typename R, bool kQuads>
__global__ void expand_low_rank_kernel(const float* p, const float* q, int64_t n, int64_t m, int64_t r,
                                       int64_t stride, T* out, R* residual, unsigned long long* flag) {
  const int64_t row = blockIdx.x, k = row / n, i = row % n;
  const float* pk = p + (k * n + i) * r;
  const float* qk = q + k * m * r;
  const int64_t base = k * stride + i * m;
  bool bad = false;
  if constexpr (kQuads) {
    T* o = out + base;
    R* res = residual ? residual + base : nullptr;
    for (int64_t jq = threadIdx.x; jq < m / 4; jq += blockDim.x) {
      float approx[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int64_t t = 0; t < r; t += 4) {
        float pt[4];
        load_pack<4>(pk + t, 0, pt);
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          float qv[4];
          load_pack<4>(qk + (jq * 4 + c) * r + t, 0, qv);
#pragma unroll
          for (int u = 0; u < 4; ++u) approx[c] += pt[u] * qv[u];  // t ascending, as one column at a time
        }
      }
      store_pack<4>(o, jq, approx);
      if (res) {
        float v[4];
        load_pack<4>(res, jq, v);
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          v[c] = to_f(from_f<R>(v[c] - approx[c]));  // as stored: 16 bits may round to Inf
          bad |= !isfinite(v[c]);
        }
        store_pack<4>(res, jq, v);
      }
    }
  } else {
    for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
      float approx = 0.0f;
      for (int64_t t = 0; t < r; ++t) approx += pk[t] * qk[j * r + t];
      out[base + j] = from_f<T>(approx);
      if (residual) {
        const R v = from_f<R>(to_f(residual[base + j]) - approx);
        residual[base + j] = v;
        bad |= !isfinite(to_f(v));
      }
    }
  }
  if (bad) *flag = 1;  // every writer writes the same value
}

// Note [The expansion's Q reads]
// Ranks 4 and 8 in quads. The one-row kernel above reads Q's values again for every row: 16
// bytes of Q from L1/L2 per element for 10 bytes of DRAM traffic (f32 residual), which held it
// well below DRAM bandwidth. An earlier block of eight rows with each thread's Q values in
// registers took many registers a thread and kept one residual load in flight a row (profiles
// in docs/performance.md). Here, as in the compensation fused with P = M Q (Note [PowerSGD's
// products as bucket passes], low_rank_project.cu): a warp takes two rows, holds their P rows
// in registers and reads each Q row once for both (through L1, where every warp of the block
// reads the same ones); each lane takes two quads of both rows at a time, their residual loads
// issued before the first store.
template <typename T, typename R, int kRank>
__global__ void __launch_bounds__(kRowsBlockWarps * 32)
    expand_rows_kernel(const float* __restrict__ p, const float* __restrict__ q, int64_t n, int64_t m, int64_t stride,
                       T* __restrict__ out, R* __restrict__ residual, unsigned long long* flag) {
  const int lane = threadIdx.x % 32;
  const WarpRows w = warp_rows(n);
  if (w.rows == 0) return;
  const int64_t k = w.matrix, first = w.first;
  const int rows = w.rows;
  float pr[kRowsPerWarp][kRank];
  load_warp_factor_rows<kRank>(p, n, w, pr);
  const float* qk = q + k * m * kRank;
  const int64_t base = k * stride + first * m;
  T* o = out + base;
  R* res = residual ? residual + base : nullptr;
  const int64_t quads = m / 4;
  bool bad = false;
  for (int64_t jq0 = lane; jq0 < quads; jq0 += 64) {
    const bool both = jq0 + 32 < quads;
    float rv[2][kRowsPerWarp][4];
    if (res) {
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; ++i)
          if ((u == 0 || both) && i < rows) load_pack<4>(res + i * m, jq0 + 32 * u, rv[u][i]);
    }
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      if (u == 1 && !both) break;
      const int64_t jq = jq0 + 32 * u;
      float approx[kRowsPerWarp][4] = {};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        float qv[kRank];
        load_factor_row<kRank>(qk + (jq * 4 + c) * kRank, qv);
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; ++i)
#pragma unroll
          for (int t = 0; t < kRank; ++t) approx[i][c] += pr[i][t] * qv[t];  // t ascending
      }
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i)
        if (i < rows) {
          store_pack<4>(o + i * m, jq, approx[i]);
          if (res) {
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              rv[u][i][c] = to_f(from_f<R>(rv[u][i][c] - approx[i][c]));  // as stored: 16 bits may round to Inf
              bad |= !isfinite(rv[u][i][c]);
            }
            store_pack<4>(res + i * m, jq, rv[u][i]);
          }
        }
    }
  }
  if (bad) *flag = 1;  // every writer writes the same value
}

// Note [The expansion without a residual]
// With the error settled a step late (distributed/hooks/powersgd.cpp) the expansion only writes
// P Q^T into the bucket. The row kernel above without its residual is L1-bound, far below
// DRAM's rate (profiled: docs/performance.md): every quad it writes takes four Q rows from L1.
// Here a thread keeps its quad of columns' Q rows in registers and walks down a block of rows,
// each row's P read from shared memory (one broadcast for all threads): the only global traffic
// is the bucket's writes. Sums in the same order as the row kernel's.
constexpr int kColumnThreads = 128;  // a quad of columns each: 512 columns a block
constexpr int kColumnRows = 64;      // rows a block walks down

template <typename T, int kRank>
__global__ void __launch_bounds__(kColumnThreads)
    expand_columns_kernel(const float* __restrict__ p, const float* __restrict__ q, int64_t n, int64_t m,
                          int64_t stride, int64_t row_blocks, int64_t slabs, T* __restrict__ out) {
  __shared__ __align__(16) float p_rows[kColumnRows * kRank];
  const int64_t slab = blockIdx.x % slabs, block = (blockIdx.x / slabs) % row_blocks;
  const int64_t k = blockIdx.x / slabs / row_blocks, row0 = block * kColumnRows;
  const int rows = n - row0 < kColumnRows ? static_cast<int>(n - row0) : kColumnRows;
  for (int t = threadIdx.x; t < rows * kRank; t += blockDim.x) p_rows[t] = p[(k * n + row0) * kRank + t];
  __syncthreads();
  const int64_t jq = slab * kColumnThreads + threadIdx.x;
  if (jq >= m / 4) return;
  float qv[4][kRank];
#pragma unroll
  for (int c = 0; c < 4; ++c) load_factor_row<kRank>(q + (k * m + jq * 4 + c) * kRank, qv[c]);
  T* o = out + k * stride + row0 * m;
#pragma unroll 4
  for (int i = 0; i < rows; ++i) {
    float pr[kRank];
#pragma unroll
    for (int t = 0; t < kRank; t += 4) {
      const float4 w = *reinterpret_cast<const float4*>(p_rows + i * kRank + t);
      pr[t] = w.x, pr[t + 1] = w.y, pr[t + 2] = w.z, pr[t + 3] = w.w;
    }
    float approx[4] = {};
#pragma unroll
    for (int c = 0; c < 4; ++c)
#pragma unroll
      for (int t = 0; t < kRank; ++t) approx[c] += pr[t] * qv[c][t];  // t ascending
    store_pack<4>(o + i * m, jq, approx);
  }
}

// The places of up to kRunsPerLaunch runs, by value: uploading them from pageable host memory
// could make the host wait for the stream (see orthogonalize.cu).
constexpr int kRunsPerLaunch = 96;  // 2.3 KB of arguments
struct RunTable {
  int64_t bucket_at[kRunsPerLaunch];
  int64_t flat_at[kRunsPerLaunch];
  int64_t numel[kRunsPerLaunch];
};

// blockIdx.y: the run; blocks along x share its elements.
template <typename S>
__global__ void gather_runs_kernel(const S* src, float* flat, RunTable t, float scale) {
  const int run = blockIdx.y;
  const S* s = src + t.bucket_at[run];
  float* f = flat + t.flat_at[run];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < t.numel[run];
       i += int64_t(gridDim.x) * blockDim.x)
    f[i] = scale * to_f(s[i]);
}

template <typename T, typename E>
__global__ void add_widened_runs_kernel(const T* grad, const E* error, E* out, RunTable t) {
  const int run = blockIdx.y;
  const int64_t at = t.bucket_at[run];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < t.numel[run];
       i += int64_t(gridDim.x) * blockDim.x)
    out[at + i] = from_f<E>(to_f(grad[at + i]) + to_f(error[at + i]));
}

template <typename T, typename R>
__global__ void scatter_runs_kernel(const float* flat, T* bucket, R* residual, RunTable t,
                                    unsigned long long* flag) {
  const int run = blockIdx.y;
  const float* f = flat + t.flat_at[run];
  const int64_t at = t.bucket_at[run];
  bool bad = false;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < t.numel[run];
       i += int64_t(gridDim.x) * blockDim.x) {
    bucket[at + i] = from_f<T>(f[i]);
    if (residual) {
      const R v = from_f<R>(to_f(residual[at + i]) - f[i]);
      residual[at + i] = v;
      bad |= !isfinite(to_f(v));
    }
  }
  if (bad) *flag = 1;
}

// Calls launch(table, runs_in_table, blocks_along_x) per chunk of kRunsPerLaunch runs.
template <typename Launch>
void for_run_tables(const BucketRuns& runs, Launch&& launch) {
  int64_t flat_at = 0;
  for (size_t first = 0; first < runs.offsets.size(); first += kRunsPerLaunch) {
    const size_t count = std::min<size_t>(kRunsPerLaunch, runs.offsets.size() - first);
    RunTable table{};
    int64_t longest = 0;
    for (size_t i = 0; i < count; ++i) {
      table.bucket_at[i] = runs.offsets[first + i];
      table.flat_at[i] = flat_at;
      table.numel[i] = runs.numels[first + i];
      flat_at += table.numel[i];
      longest = std::max(longest, table.numel[i]);
    }
    if (longest == 0) continue;
    const unsigned along = static_cast<unsigned>(std::min<int64_t>((longest + kThreads - 1) / kThreads, 64));
    launch(table, static_cast<unsigned>(count), along);
  }
}

void check_f32(const Tensor& t, const char* op) {
  check_tensor(t.dtype() == DType::kF32 && t.is_contiguous() && t.device().is_cuda(), op,
               "a contiguous f32 CUDA tensor", t);
}

// An error-feedback buffer (or M) beside a bucket of `bucket` dtype: f32, or the bucket's own.
void check_error_buffer(const Tensor& t, DType bucket, const char* op) {
  check_tensor((t.dtype() == DType::kF32 || t.dtype() == bucket) && t.is_contiguous() && t.device().is_cuda(), op,
               (std::string("a contiguous f32 or ") + dtype_name(bucket) + " CUDA tensor").c_str(), t);
}

// grad, and error and out beside it, for the compensation out := grad + error.
void check_compensation(const Tensor& grad, const Tensor& error, const Tensor& out, const char* op) {
  check_tensor(grad.is_contiguous() && grad.numel() == out.numel() && grad.device().is_cuda(), op,
               "a contiguous CUDA gradient like out", grad);
  check_error_buffer(error, grad.dtype(), op);
  check_error_buffer(out, grad.dtype(), op);
  VITDDP_CHECK(error.numel() == out.numel() && error.dtype() == out.dtype(), op, ": ", error.description(), " vs ",
               out.description());
  VITDDP_CHECK(error.device() == grad.device() && out.device() == grad.device(), op, ": ", error.description(), " and ",
               out.description(), " beside ", grad.description());
}

}  // namespace

void add_widened(const Tensor& grad, const Tensor& error, const Tensor& out) {
  check_compensation(grad, error, out, "add_widened");
  const int64_t n = out.numel();
  if (n == 0) return;
  OpScope scope("powersgd compensate");
  dispatch_bucket_and_error(grad.dtype(), out.dtype(), "add_widened", [&](auto zero, auto error_zero) {
    using T = decltype(zero);
    using E = decltype(error_zero);
    const T* g = static_cast<const T*>(grad.data_ptr());
    const E* e = static_cast<const E*>(error.data_ptr());
    E* o = static_cast<E*>(out.data_ptr());
    if (quad_aligned(g, sizeof(T)) && quad_aligned(e, sizeof(E)) && quad_aligned(o, sizeof(E)))
      add_widened_quads_kernel<T, E><<<grid_for((n + 3) / 4), kThreads, 0, current_stream()>>>(g, e, o, n);
    else
      add_widened_kernel<T, E><<<grid_for(n), kThreads, 0, current_stream()>>>(g, e, o, n);
    CUDA_CHECK_LAUNCH();
  });
}

void add_widened_runs(const Tensor& grad, const Tensor& error, const BucketRuns& runs, const Tensor& out) {
  check_compensation(grad, error, out, "add_widened_runs");
  check_runs_inside(runs, grad, "add_widened_runs");
  OpScope scope("powersgd compensate");
  dispatch_bucket_and_error(grad.dtype(), out.dtype(), "add_widened_runs", [&](auto zero, auto error_zero) {
    using T = decltype(zero);
    using E = decltype(error_zero);
    for_run_tables(runs, [&](const RunTable& table, unsigned count, unsigned along) {
      add_widened_runs_kernel<T, E><<<dim3(along, count), kThreads, 0, current_stream()>>>(
          static_cast<const T*>(grad.data_ptr()), static_cast<const E*>(error.data_ptr()),
          static_cast<E*>(out.data_ptr()), table);
      CUDA_CHECK_LAUNCH();
    });
  });
}

void expand_low_rank(const Tensor& p, const Tensor& q, const LowRankGroup& g, const Tensor& out,
                     const Tensor& residual, const Tensor& flag) {
  check_f32(p, "expand_low_rank");
  check_f32(q, "expand_low_rank");
  check_tensor(out.is_contiguous() && out.device().is_cuda(), "expand_low_rank", "a contiguous CUDA bucket", out);
  check_low_rank_group(p, q, g, out);
  VITDDP_CHECK(g.count * g.n <= int64_t(0x7fffffff), "expand_low_rank: too many rows for one launch");
  if (residual.defined()) {
    check_error_buffer(residual, out.dtype(), "expand_low_rank");
    VITDDP_CHECK(residual.numel() == out.numel(), "expand_low_rank: ", residual.description(), " vs ",
                 out.description());
    // The kernels take them as unaliased (__restrict__): overlapping bytes would give wrong values.
    check_apart(out, residual, false, "the residual overlaps the bucket", "expand_low_rank");
  }
  check_tensor(flag.dtype() == DType::kI64 && flag.numel() >= 1 && flag.device().is_cuda(), "expand_low_rank",
               "an i64 CUDA flag", flag);
  OpScope scope("powersgd expand");
  const DType residual_dtype = residual.defined() ? residual.dtype() : DType::kF32;
  dispatch_bucket_and_error(out.dtype(), residual_dtype, "expand_low_rank", [&](auto zero, auto residual_zero) {
    using T = decltype(zero);
    using R = decltype(residual_zero);
    T* o = static_cast<T*>(out.data_ptr()) + g.offset;
    R* res = residual.defined() ? static_cast<R*>(residual.data_ptr()) + g.offset : nullptr;
    // Every row starts aligned when the first does and rows and matrices are whole quads apart.
    // P's and Q's rows are r apart, so r % 4 == 0 keeps every row aligned once the first is.
    const bool quads = g.m % 4 == 0 && g.stride % 4 == 0 && g.rank % 4 == 0 && quad_aligned(o, sizeof(T)) &&
                       quad_aligned(res, sizeof(R)) && quad_aligned(p.data<float>() + g.p_offset, 4) &&
                       quad_aligned(q.data<float>() + g.q_offset, 4);
    const int64_t lanes = quads ? g.m / 4 : g.m;
    const int threads = lanes >= 256 ? 256 : static_cast<int>((lanes + 31) / 32 * 32);
    auto* bad = reinterpret_cast<unsigned long long*>(flag.data<int64_t>());
    const float* pp = p.data<float>() + g.p_offset;
    const float* qq = q.data<float>() + g.q_offset;
    if (quads && (g.rank == 4 || g.rank == 8) && !res) {  // See Note [The expansion without a residual]
      const int64_t row_blocks = (g.n + kColumnRows - 1) / kColumnRows;
      const int64_t slabs = (g.m / 4 + kColumnThreads - 1) / kColumnThreads;
      VITDDP_CHECK(g.count * row_blocks * slabs <= int64_t(0x7fffffff),
                   "expand_low_rank: too many blocks for one launch");
      const unsigned blocks = static_cast<unsigned>(g.count * row_blocks * slabs);
      if (g.rank == 4)
        expand_columns_kernel<T, 4><<<blocks, kColumnThreads, 0, current_stream()>>>(pp, qq, g.n, g.m, g.stride,
                                                                                    row_blocks, slabs, o);
      else
        expand_columns_kernel<T, 8><<<blocks, kColumnThreads, 0, current_stream()>>>(pp, qq, g.n, g.m, g.stride,
                                                                                    row_blocks, slabs, o);
    } else if (quads && (g.rank == 4 || g.rank == 8)) {  // See Note [The expansion's Q reads]
      const int64_t blocks = row_pass_blocks(g.count, g.n);
      VITDDP_CHECK(blocks <= int64_t(0x7fffffff), "expand_low_rank: too many blocks for one launch");
      if (g.rank == 4)
        expand_rows_kernel<T, R, 4><<<static_cast<unsigned>(blocks), kRowsBlockWarps * 32, 0, current_stream()>>>(
            pp, qq, g.n, g.m, g.stride, o, res, bad);
      else
        expand_rows_kernel<T, R, 8><<<static_cast<unsigned>(blocks), kRowsBlockWarps * 32, 0, current_stream()>>>(
            pp, qq, g.n, g.m, g.stride, o, res, bad);
    } else {
      const unsigned rows = static_cast<unsigned>(g.count * g.n);
      if (quads)
        expand_low_rank_kernel<T, R, true><<<rows, threads, 0, current_stream()>>>(pp, qq, g.n, g.m, g.rank, g.stride,
                                                                                  o, res, bad);
      else
        expand_low_rank_kernel<T, R, false><<<rows, threads, 0, current_stream()>>>(pp, qq, g.n, g.m, g.rank,
                                                                                   g.stride, o, res, bad);
    }
    CUDA_CHECK_LAUNCH();
  });
}

void gather_runs(const Tensor& src, const BucketRuns& runs, double scale, const Tensor& flat) {
  check_tensor(src.is_contiguous() && src.device().is_cuda(), "gather_runs", "a contiguous CUDA tensor", src);
  check_f32(flat, "gather_runs");
  check_bucket_runs(runs, src, flat, "gather_runs");
  OpScope scope("powersgd uncompressed");
  dispatch_floating(src.dtype(), "gather_runs", [&](auto zero) {
    using S = decltype(zero);
    for_run_tables(runs, [&](const RunTable& table, unsigned count, unsigned along) {
      gather_runs_kernel<S><<<dim3(along, count), kThreads, 0, current_stream()>>>(
          static_cast<const S*>(src.data_ptr()), flat.data<float>(), table, static_cast<float>(scale));
      CUDA_CHECK_LAUNCH();
    });
  });
}

void scatter_runs(const Tensor& flat, const BucketRuns& runs, const Tensor& bucket, const Tensor& residual,
                  const Tensor& flag) {
  check_f32(flat, "scatter_runs");
  check_tensor(bucket.is_contiguous() && bucket.device().is_cuda(), "scatter_runs", "a contiguous CUDA bucket", bucket);
  check_bucket_runs(runs, bucket, flat, "scatter_runs", residual);
  if (residual.defined()) check_error_buffer(residual, bucket.dtype(), "scatter_runs");
  check_tensor(flag.dtype() == DType::kI64 && flag.numel() >= 1 && flag.device().is_cuda(), "scatter_runs",
               "an i64 CUDA flag", flag);
  OpScope scope("powersgd uncompressed");
  auto* bad = reinterpret_cast<unsigned long long*>(flag.data<int64_t>());
  const DType residual_dtype = residual.defined() ? residual.dtype() : DType::kF32;
  dispatch_bucket_and_error(bucket.dtype(), residual_dtype, "scatter_runs", [&](auto zero, auto residual_zero) {
    using T = decltype(zero);
    using R = decltype(residual_zero);
    R* res = residual.defined() ? static_cast<R*>(residual.data_ptr()) : nullptr;
    for_run_tables(runs, [&](const RunTable& table, unsigned count, unsigned along) {
      scatter_runs_kernel<T, R><<<dim3(along, count), kThreads, 0, current_stream()>>>(
          flat.data<float>(), static_cast<T*>(bucket.data_ptr()), res, table, bad);
      CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace vitddp::cuda
