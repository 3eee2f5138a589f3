#include <algorithm>

#include "framework/cpu/low_rank.h"
#include "framework/cuda/check.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/op_profiler.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {

// Streams both inputs once (bandwidth-bound: the whole bucket, every PowerSGD step); in quads
// where all three are 16-byte aligned (a bucket and its error buffers always are).
template <typename T>
__global__ void add_widened_kernel(const T* g, const float* e, float* out, int64_t n) {
  VITDDP_GRID_STRIDE_LOOP(i, n) out[i] = to_f(__ldcs(g + i)) + __ldcs(e + i);
}
template <typename T>
__global__ void add_widened_quads_kernel(const T* g, const float* e, float* out, int64_t n) {
  const int64_t quads = n / 4;
  VITDDP_GRID_STRIDE_LOOP(k, quads) {
    float a[4], b[4];
    load_pack<4>(g, k, a);
    load_pack<4>(e, k, b);
#pragma unroll
    for (int t = 0; t < 4; ++t) a[t] += b[t];
    store_pack<4>(out, k, a);
  }
  VITDDP_GRID_STRIDE_LOOP_FROM(i, quads * 4, n) out[i] = to_f(g[i]) + e[i];
}

// One block per matrix row (k, i): P's row is read once per thread from L1, Q's rows stream
// past in j order, and the row of out (and of the residual) is written by consecutive threads.
// Quads: each thread takes four columns, when m and r are multiples of 4 and the row starts
// aligned in out, the residual and Q: Q's four rows of r values are read in 16-byte words
// (scalar reads of them, 64 bytes apart across a warp, made the pass slower than one column
// per thread: 2.6 against 1.5 ms for ViT-L's bucket).
template <typename T, bool kQuads>
__global__ void expand_low_rank_kernel(const float* p, const float* q, int64_t n, int64_t m, int64_t r,
                                       int64_t stride, T* out, float* residual, unsigned long long* flag) {
  const int64_t row = blockIdx.x, k = row / n, i = row % n;
  const float* pk = p + (k * n + i) * r;
  const float* qk = q + k * m * r;
  const int64_t base = k * stride + i * m;
  bool bad = false;
  if constexpr (kQuads) {
    T* o = out + base;
    float* res = residual ? residual + base : nullptr;
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
          v[c] -= approx[c];
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
        const float v = residual[base + j] - approx;
        residual[base + j] = v;
        bad |= !isfinite(v);
      }
    }
  }
  if (bad) *flag = 1;  // every writer writes the same value
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
__global__ void gather_runs_kernel(const float* src, float* flat, RunTable t, float scale) {
  const int run = blockIdx.y;
  const float* s = src + t.bucket_at[run];
  float* f = flat + t.flat_at[run];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < t.numel[run];
       i += int64_t(gridDim.x) * blockDim.x)
    f[i] = scale * s[i];
}

template <typename T>
__global__ void scatter_runs_kernel(const float* flat, T* bucket, float* residual, RunTable t,
                                    unsigned long long* flag) {
  const int run = blockIdx.y;
  const float* f = flat + t.flat_at[run];
  const int64_t at = t.bucket_at[run];
  bool bad = false;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < t.numel[run];
       i += int64_t(gridDim.x) * blockDim.x) {
    bucket[at + i] = from_f<T>(f[i]);
    if (residual) {
      const float v = residual[at + i] - f[i];
      residual[at + i] = v;
      bad |= !isfinite(v);
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

}  // namespace

void add_widened(const Tensor& grad, const Tensor& error, const Tensor& out) {
  check_f32(error, "add_widened");
  check_f32(out, "add_widened");
  check_tensor(grad.is_contiguous() && grad.numel() == out.numel() && grad.device().is_cuda(), "add_widened",
               "a contiguous CUDA gradient like out", grad);
  VITDDP_CHECK(error.numel() == out.numel(), "add_widened: ", error.description(), " vs ", out.description());
  const int64_t n = out.numel();
  if (n == 0) return;
  OpScope scope("powersgd compensate");
  dispatch_floating(grad.dtype(), "add_widened", [&](auto zero) {
    using T = decltype(zero);
    const T* g = static_cast<const T*>(grad.data_ptr());
    if (quad_aligned(g, sizeof(T)) && quad_aligned(error.data<float>(), 4) && quad_aligned(out.data<float>(), 4))
      add_widened_quads_kernel<T><<<grid_for((n + 3) / 4), kThreads, 0, current_stream()>>>(g, error.data<float>(),
                                                                                           out.data<float>(), n);
    else
      add_widened_kernel<T><<<grid_for(n), kThreads, 0, current_stream()>>>(g, error.data<float>(), out.data<float>(),
                                                                           n);
    CUDA_CHECK_LAUNCH();
  });
}

void expand_low_rank(const Tensor& p, const Tensor& q, const LowRankGroup& g, const Tensor& out,
                     const Tensor& residual, const Tensor& flag) {
  check_f32(p, "expand_low_rank");
  check_f32(q, "expand_low_rank");
  check_tensor(out.is_contiguous() && out.device().is_cuda(), "expand_low_rank", "a contiguous CUDA bucket", out);
  check_low_rank_group(p, q, g, out);
  VITDDP_CHECK(g.count * g.n <= int64_t(0x7fffffff), "expand_low_rank: too many rows for one launch");
  float* res = nullptr;
  if (residual.defined()) {
    check_f32(residual, "expand_low_rank");
    VITDDP_CHECK(residual.numel() == out.numel(), "expand_low_rank: ", residual.description(), " vs ",
                 out.description());
    res = residual.data<float>() + g.offset;
  }
  check_tensor(flag.dtype() == DType::kI64 && flag.numel() >= 1 && flag.device().is_cuda(), "expand_low_rank",
               "an i64 CUDA flag", flag);
  OpScope scope("powersgd expand");
  const unsigned rows = static_cast<unsigned>(g.count * g.n);
  dispatch_floating(out.dtype(), "expand_low_rank", [&](auto zero) {
    using T = decltype(zero);
    T* o = static_cast<T*>(out.data_ptr()) + g.offset;
    // Every row starts aligned when the first does and rows and matrices are whole quads apart.
    // P's and Q's rows are r apart, so r % 4 == 0 keeps every row aligned once the first is.
    const bool quads = g.m % 4 == 0 && g.stride % 4 == 0 && g.rank % 4 == 0 && quad_aligned(o, sizeof(T)) &&
                       quad_aligned(res, 4) && quad_aligned(p.data<float>() + g.p_offset, 4) &&
                       quad_aligned(q.data<float>() + g.q_offset, 4);
    const int64_t lanes = quads ? g.m / 4 : g.m;
    const int threads = lanes >= 256 ? 256 : static_cast<int>((lanes + 31) / 32 * 32);
    auto* bad = reinterpret_cast<unsigned long long*>(flag.data<int64_t>());
    const float* pp = p.data<float>() + g.p_offset;
    const float* qq = q.data<float>() + g.q_offset;
    if (quads)
      expand_low_rank_kernel<T, true><<<rows, threads, 0, current_stream()>>>(pp, qq, g.n, g.m, g.rank, g.stride, o,
                                                                             res, bad);
    else
      expand_low_rank_kernel<T, false><<<rows, threads, 0, current_stream()>>>(pp, qq, g.n, g.m, g.rank, g.stride, o,
                                                                              res, bad);
    CUDA_CHECK_LAUNCH();
  });
}

void gather_runs(const Tensor& src, const BucketRuns& runs, double scale, const Tensor& flat) {
  check_f32(src, "gather_runs");
  check_f32(flat, "gather_runs");
  check_bucket_runs(runs, src, flat, "gather_runs");
  OpScope scope("powersgd uncompressed");
  for_run_tables(runs, [&](const RunTable& table, unsigned count, unsigned along) {
    gather_runs_kernel<<<dim3(along, count), kThreads, 0, current_stream()>>>(src.data<float>(), flat.data<float>(),
                                                                             table, static_cast<float>(scale));
    CUDA_CHECK_LAUNCH();
  });
}

void scatter_runs(const Tensor& flat, const BucketRuns& runs, const Tensor& bucket, const Tensor& residual,
                  const Tensor& flag) {
  check_f32(flat, "scatter_runs");
  check_tensor(bucket.is_contiguous() && bucket.device().is_cuda(), "scatter_runs", "a contiguous CUDA bucket", bucket);
  check_bucket_runs(runs, bucket, flat, "scatter_runs", residual);
  if (residual.defined()) check_f32(residual, "scatter_runs");
  float* res = residual.defined() ? residual.data<float>() : nullptr;
  check_tensor(flag.dtype() == DType::kI64 && flag.numel() >= 1 && flag.device().is_cuda(), "scatter_runs",
               "an i64 CUDA flag", flag);
  OpScope scope("powersgd uncompressed");
  auto* bad = reinterpret_cast<unsigned long long*>(flag.data<int64_t>());
  dispatch_floating(bucket.dtype(), "scatter_runs", [&](auto zero) {
    using T = decltype(zero);
    for_run_tables(runs, [&](const RunTable& table, unsigned count, unsigned along) {
      scatter_runs_kernel<T><<<dim3(along, count), kThreads, 0, current_stream()>>>(
          flat.data<float>(), static_cast<T*>(bucket.data_ptr()), res, table, bad);
      CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace vitddp::cuda
