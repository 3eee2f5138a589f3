#include "framework/cuda/check.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/op_profiler.h"
#include "framework/cuda/optimizer.h"
#include "framework/cuda/stream.h"

#include <initializer_list>

namespace vitddp::cuda {
namespace {

// What every update kernel reads besides its state: the buffers' typed pointers and the step's
// constants, loaded once per thread.
template <typename G, typename P>
struct Pass {
  float* p;
  const G* g;
  P* p16;      // null without mixed precision
  float* ema;  // null without a model EMA
  float grad_scale;
  StepConstants c;
  const int64_t* decay_mask;  // null: decay everywhere
  int64_t base;               // arena index of element 0
  bool report;
  // Whether weight decay applies to the elements of pack k (all of a pack lie in one chunk).
  template <int N>
  __device__ __forceinline__ bool decays(int64_t k) const {
    if (!decay_mask) return true;
    const int64_t chunk = (base + k * N) / 16;
    return (decay_mask[chunk / 64] >> (chunk % 64)) & 1;
  }
};

template <int N>
__device__ __forceinline__ void note_nonfinite(int64_t k, const float (&g)[N], unsigned long long& found) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    if (!isfinite(g[i])) found = min(found, static_cast<unsigned long long>(k * N + i));
}

// The gradient of pack k, scaled; the non-finite scan sees it as it arrived.
template <int N, typename G, typename P>
__device__ __forceinline__ void load_grad(const Pass<G, P>& a, int64_t k, float (&g)[N], unsigned long long& found) {
  load_pack<N>(a.g, k, g);
  if (a.report) note_nonfinite<N>(k, g, found);
#pragma unroll
  for (int i = 0; i < N; ++i) g[i] *= a.grad_scale;
}

// The updated weights of pack k: master, 16-bit copy and EMA.
template <int N, typename G, typename P>
__device__ __forceinline__ void store_weights(const Pass<G, P>& a, int64_t k, const float (&w)[N]) {
  store_pack<N>(a.p, k, w);
  if (a.p16) store_pack<N>(a.p16, k, w);
  if (a.ema) {
    float e[N];
    load_pack<N>(a.ema, k, e);
#pragma unroll
    for (int i = 0; i < N; ++i) e[i] = __fadd_rn(__fmul_rn(a.c.ema_keep, e[i]), __fmul_rn(a.c.ema_take, w[i]));
    store_pack<N>(a.ema, k, e);
  }
}

template <int N, typename G, typename P>
__device__ __forceinline__ void sgd_pack(const Pass<G, P>& a, int64_t k, float* buf, float mu, float wd,
                                         unsigned long long& found) {
  float w[N], d[N];
  load_pack<N>(a.p, k, w);
  load_grad<N>(a, k, d, found);
  const float wd_here = a.template decays<N>(k) ? wd : 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) d[i] += wd_here * w[i];
  if (buf) {
    float m[N];
    load_pack<N>(buf, k, m);
#pragma unroll
    for (int i = 0; i < N; ++i) d[i] = mu * m[i] + d[i];
    store_pack<N>(buf, k, d);
  }
#pragma unroll
  for (int i = 0; i < N; ++i) w[i] -= a.c.lr * d[i];
  store_weights<N>(a, k, w);
}

template <int N, typename G, typename P>
__device__ __forceinline__ void adamw_pack(const Pass<G, P>& a, int64_t k, float* m, float* v, float b1, float b2,
                                           float eps, unsigned long long& found) {
  float w[N], gi[N], mi[N], vi[N];
  load_pack<N>(a.p, k, w);
  load_grad<N>(a, k, gi, found);
  load_pack<N>(m, k, mi);
  load_pack<N>(v, k, vi);
  const float decay = a.template decays<N>(k) ? a.c.decay : 1.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    mi[i] = b1 * mi[i] + (1.0f - b1) * gi[i];
    vi[i] = b2 * vi[i] + (1.0f - b2) * gi[i] * gi[i];
    w[i] = w[i] * decay - a.c.step_size * mi[i] / (sqrtf(vi[i]) * a.c.inv_sqrt_bc2 + eps);
  }
  store_pack<N>(m, k, mi);
  store_pack<N>(v, k, vi);
  store_weights<N>(a, k, w);
}

__global__ void reset_report_kernel(int64_t* flag) { *flag = INT64_MAX; }

__global__ void write_constants_kernel(StepConstants* out, StepConstants values) { *out = values; }

// One atomic per thread that saw a non-finite gradient (normally none).
__device__ __forceinline__ void report_found(int64_t* report, unsigned long long found, int64_t base) {
  if (report && found != ~0ull) atomicMin(reinterpret_cast<unsigned long long*>(report), found + base);
}

// The pass as a kernel sees it: constants and the clip scale read from device memory.
template <typename G, typename P>
__device__ __forceinline__ Pass<G, P> load_pass(const FlatBuffers& b) {
  return Pass<G, P>{b.master,
                    static_cast<const G*>(b.grads),
                    static_cast<P*>(b.params16),
                    b.ema,
                    b.grad_scale ? *b.grad_scale : 1.0f,
                    *b.constants,
                    b.decay_mask,
                    b.index_base,
                    b.report_nonfinite != nullptr};
}

// kQuads: every buffer is quad-aligned, and all but the last n % 4 elements go four at a time
// (the update is memory-bound: one pass over every flat buffer a step).
template <typename G, typename P, bool kQuads>
__global__ void sgd_kernel(FlatBuffers b, float* buf, float mu, float wd) {
  if (b.skip_if_set && *b.skip_if_set != INT64_MAX) return;
  const Pass<G, P> a = load_pass<G, P>(b);
  unsigned long long found = ~0ull;
  const int64_t quads = kQuads ? b.n / 4 : 0;
  VITDDP_GRID_STRIDE_LOOP(q, quads) sgd_pack<4>(a, q, buf, mu, wd, found);
  VITDDP_GRID_STRIDE_LOOP_FROM(i, quads * 4, b.n) sgd_pack<1>(a, i, buf, mu, wd, found);
  report_found(b.report_nonfinite, found, b.index_base);
}

template <typename G, typename P, bool kQuads>
__global__ void adamw_kernel(FlatBuffers b, float* m, float* v, float b1, float b2, float eps) {
  if (b.skip_if_set && *b.skip_if_set != INT64_MAX) return;
  const Pass<G, P> a = load_pass<G, P>(b);
  unsigned long long found = ~0ull;
  const int64_t quads = kQuads ? b.n / 4 : 0;
  VITDDP_GRID_STRIDE_LOOP(q, quads) adamw_pack<4>(a, q, m, v, b1, b2, eps, found);
  VITDDP_GRID_STRIDE_LOOP_FROM(i, quads * 4, b.n) adamw_pack<1>(a, i, m, v, b1, b2, eps, found);
  report_found(b.report_nonfinite, found, b.index_base);
}

// Whether every buffer of the update (null ones aside) may be read as quads.
bool quads_fit(const FlatBuffers& b, std::initializer_list<const float*> state) {
  bool fit = quad_aligned(b.master, sizeof(float)) && quad_aligned(b.grads, dtype_size(b.grad_dtype)) &&
             (!b.params16 || quad_aligned(b.params16, dtype_size(b.params16_dtype))) &&
             (!b.ema || quad_aligned(b.ema, sizeof(float)));
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

void write_step_constants(StepConstants* device_constants, const StepConstants& values) {
  OpScope scope("optimizer");
  write_constants_kernel<<<1, 1, 0, current_stream()>>>(device_constants, values);
  CUDA_CHECK_LAUNCH();
}

void reset_nonfinite_report(int64_t* report) {
  if (!report) return;
  OpScope scope("optimizer");
  reset_report_kernel<<<1, 1, 0, current_stream()>>>(report);
  CUDA_CHECK_LAUNCH();
}

void sgd_step(const FlatBuffers& b, float* momentum, float mu, float wd) {
  VITDDP_ASSERT(b.constants, "sgd_step: no step constants");
  OpScope scope("optimizer");
  dispatch_buffers(b, [&](auto g, auto p) {
    using G = decltype(g);
    using P = decltype(p);
    const bool quads = quads_fit(b, {momentum});
    auto kernel = quads ? sgd_kernel<G, P, true> : sgd_kernel<G, P, false>;
    kernel<<<grid_for(quads ? b.n / 4 + 1 : b.n), kThreads, 0, current_stream()>>>(b, momentum, mu, wd);
    CUDA_CHECK_LAUNCH();
  });
}

void adamw_step(const FlatBuffers& b, float* exp_avg, float* exp_avg_sq, float beta1, float beta2, float eps) {
  VITDDP_ASSERT(b.constants, "adamw_step: no step constants");
  OpScope scope("optimizer");
  dispatch_buffers(b, [&](auto g, auto p) {
    using G = decltype(g);
    using P = decltype(p);
    const bool quads = quads_fit(b, {exp_avg, exp_avg_sq});
    auto kernel = quads ? adamw_kernel<G, P, true> : adamw_kernel<G, P, false>;
    kernel<<<grid_for(quads ? b.n / 4 + 1 : b.n), kThreads, 0, current_stream()>>>(b, exp_avg, exp_avg_sq, beta1,
                                                                                   beta2, eps);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace vitddp::cuda
