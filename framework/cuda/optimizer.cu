#include "framework/cuda/check.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/op_profiler.h"
#include "framework/cuda/optimizer.h"
#include "framework/cuda/stream.h"

#include <initializer_list>

namespace vitddp::cuda {
namespace {

// The update of pack k (N elements) of the flat buffers; `buf` (momentum) and `p16` (the
// 16-bit weight copy) may be null.
// `found` (with a non-finite report only): the smallest index of a non-finite gradient element
// this thread has seen.
template <int N>
__device__ __forceinline__ void note_nonfinite(int64_t k, const float (&g)[N], unsigned long long& found) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    if (!isfinite(g[i])) found = min(found, static_cast<unsigned long long>(k * N + i));
}

template <int N, typename G, typename P>
__device__ __forceinline__ void sgd_pack(int64_t k, float* p, const G* g, P* p16, float* buf, float lr, float mu,
                                         float wd, bool report, unsigned long long& found) {
  float w[N], d[N];
  load_pack<N>(p, k, w);
  load_pack<N>(g, k, d);
  if (report) note_nonfinite<N>(k, d, found);
#pragma unroll
  for (int i = 0; i < N; ++i) d[i] += wd * w[i];
  if (buf) {
    float m[N];
    load_pack<N>(buf, k, m);
#pragma unroll
    for (int i = 0; i < N; ++i) d[i] = mu * m[i] + d[i];
    store_pack<N>(buf, k, d);
  }
#pragma unroll
  for (int i = 0; i < N; ++i) w[i] -= lr * d[i];
  store_pack<N>(p, k, w);
  if (p16) store_pack<N>(p16, k, w);
}

template <int N, typename G, typename P>
__device__ __forceinline__ void adamw_pack(int64_t k, float* p, const G* g, P* p16, float* m, float* v, float decay,
                                           float b1, float b2, float eps, float step_size, float inv_sqrt_bc2,
                                           bool report, unsigned long long& found) {
  float w[N], gi[N], mi[N], vi[N];
  load_pack<N>(p, k, w);
  load_pack<N>(g, k, gi);
  if (report) note_nonfinite<N>(k, gi, found);
  load_pack<N>(m, k, mi);
  load_pack<N>(v, k, vi);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    mi[i] = b1 * mi[i] + (1.0f - b1) * gi[i];
    vi[i] = b2 * vi[i] + (1.0f - b2) * gi[i] * gi[i];
    w[i] = w[i] * decay - step_size * mi[i] / (sqrtf(vi[i]) * inv_sqrt_bc2 + eps);
  }
  store_pack<N>(m, k, mi);
  store_pack<N>(v, k, vi);
  store_pack<N>(p, k, w);
  if (p16) store_pack<N>(p16, k, w);
}

__global__ void reset_report_kernel(int64_t* flag) { *flag = INT64_MAX; }

// One atomic per thread that saw a non-finite gradient (normally none).
__device__ __forceinline__ void report_found(int64_t* report, unsigned long long found, int64_t base) {
  if (report && found != ~0ull) atomicMin(reinterpret_cast<unsigned long long*>(report), found + base);
}

// kQuads: every buffer is quad-aligned, and all but the last n % 4 elements go four at a time
// (the update is memory-bound: one pass over every flat buffer a step).
template <typename G, typename P, bool kQuads>
__global__ void sgd_kernel(float* p, const G* g, P* p16, float* buf, int64_t n, float lr, float mu, float wd,
                           const int64_t* skip, int64_t* report, int64_t base) {
  if (skip && *skip != INT64_MAX) return;
  const bool reporting = report != nullptr;
  unsigned long long found = ~0ull;
  const int64_t quads = kQuads ? n / 4 : 0;
  VITDDP_GRID_STRIDE_LOOP(q, quads) sgd_pack<4>(q, p, g, p16, buf, lr, mu, wd, reporting, found);
  VITDDP_GRID_STRIDE_LOOP_FROM(i, quads * 4, n) sgd_pack<1>(i, p, g, p16, buf, lr, mu, wd, reporting, found);
  report_found(report, found, base);
}

template <typename G, typename P, bool kQuads>
__global__ void adamw_kernel(float* p, const G* g, P* p16, float* m, float* v, int64_t n, float decay, float b1,
                             float b2, float eps, float step_size, float inv_sqrt_bc2, const int64_t* skip,
                             int64_t* report, int64_t base) {
  if (skip && *skip != INT64_MAX) return;
  const bool reporting = report != nullptr;
  unsigned long long found = ~0ull;
  const int64_t quads = kQuads ? n / 4 : 0;
  VITDDP_GRID_STRIDE_LOOP(q, quads) {
    adamw_pack<4>(q, p, g, p16, m, v, decay, b1, b2, eps, step_size, inv_sqrt_bc2, reporting, found);
  }
  VITDDP_GRID_STRIDE_LOOP_FROM(i, quads * 4, n) {
    adamw_pack<1>(i, p, g, p16, m, v, decay, b1, b2, eps, step_size, inv_sqrt_bc2, reporting, found);
  }
  report_found(report, found, base);
}

// Whether every buffer of the update (null ones aside) may be read as quads.
bool quads_fit(const FlatBuffers& b, std::initializer_list<const float*> state) {
  bool fit = quad_aligned(b.master, sizeof(float)) && quad_aligned(b.grads, dtype_size(b.grad_dtype)) &&
             (!b.params16 || quad_aligned(b.params16, dtype_size(b.params16_dtype)));
  for (const float* s : state) fit = fit && quad_aligned(s, sizeof(float));
  return fit;
}

// Calls fn(G{}, P{}) with the gradient and weight-copy element types.
template <typename Fn>
void dispatch_buffers(const FlatBuffers& b, Fn&& fn) {
  dispatch_floating(b.grad_dtype, "optimizer", [&](auto g) {
    dispatch_floating(b.params16 ? b.params16_dtype : DType::kBF16, "optimizer", [&](auto p) { fn(g, p); });
  });
}

}  // namespace

void reset_nonfinite_report(int64_t* report) {
  if (!report) return;
  OpScope scope("optimizer");
  reset_report_kernel<<<1, 1, 0, current_stream()>>>(report);
  CUDA_CHECK_LAUNCH();
}

void sgd_step(const FlatBuffers& b, float* momentum, float lr, float mu, float wd) {
  OpScope scope("optimizer");
  dispatch_buffers(b, [&](auto g, auto p) {
    using G = decltype(g);
    using P = decltype(p);
    const bool quads = quads_fit(b, {momentum});
    auto kernel = quads ? sgd_kernel<G, P, true> : sgd_kernel<G, P, false>;
    kernel<<<grid_for(quads ? b.n / 4 + 1 : b.n), kThreads, 0, current_stream()>>>(
        b.master, static_cast<const G*>(b.grads), static_cast<P*>(b.params16), momentum, b.n, lr, mu, wd, b.skip_if_set,
        b.report_nonfinite, b.index_base);
    CUDA_CHECK_LAUNCH();
  });
}

void adamw_step(const FlatBuffers& b, float* exp_avg, float* exp_avg_sq, float decay, float beta1, float beta2,
                float eps, float step_size, float inv_sqrt_bc2) {
  OpScope scope("optimizer");
  dispatch_buffers(b, [&](auto g, auto p) {
    using G = decltype(g);
    using P = decltype(p);
    const bool quads = quads_fit(b, {exp_avg, exp_avg_sq});
    auto kernel = quads ? adamw_kernel<G, P, true> : adamw_kernel<G, P, false>;
    kernel<<<grid_for(quads ? b.n / 4 + 1 : b.n), kThreads, 0, current_stream()>>>(
        b.master, static_cast<const G*>(b.grads), static_cast<P*>(b.params16), exp_avg, exp_avg_sq, b.n, decay, beta1,
        beta2, eps, step_size, inv_sqrt_bc2, b.skip_if_set, b.report_nonfinite, b.index_base);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace vitddp::cuda
