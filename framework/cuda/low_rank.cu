#include "framework/cpu/low_rank.h"
#include "framework/cuda/check.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/op_profiler.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {

// Streams both inputs once (bandwidth-bound: the whole bucket, every PowerSGD step).
template <typename T>
__global__ void add_widened_kernel(const T* g, const float* e, float* out, int64_t n) {
  VITDDP_GRID_STRIDE_LOOP(i, n) out[i] = to_f(__ldcs(g + i)) + __ldcs(e + i);
}

// One block per matrix row (k, i): P's row is read once per thread from L1, Q's rows stream
// past in j order, and the row of out (and of the residual) is written by consecutive threads.
template <typename T>
__global__ void expand_low_rank_kernel(const float* p, const float* q, int64_t n, int64_t m, int64_t r,
                                       int64_t stride, T* out, float* residual, unsigned long long* flag) {
  const int64_t row = blockIdx.x, k = row / n, i = row % n;
  const float* pk = p + (k * n + i) * r;
  const float* qk = q + k * m * r;
  const int64_t base = k * stride + i * m;
  bool bad = false;
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
  if (bad) *flag = 1;  // every writer writes the same value
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
    add_widened_kernel<T><<<grid_for(n), kThreads, 0, current_stream()>>>(
        static_cast<const T*>(grad.data_ptr()), error.data<float>(), out.data<float>(), n);
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
  const int threads = g.m >= 256 ? 256 : static_cast<int>((g.m + 31) / 32 * 32);
  dispatch_floating(out.dtype(), "expand_low_rank", [&](auto zero) {
    using T = decltype(zero);
    expand_low_rank_kernel<T><<<rows, threads, 0, current_stream()>>>(
        p.data<float>() + g.p_offset, q.data<float>() + g.q_offset, g.n, g.m, g.rank, g.stride,
        static_cast<T*>(out.data_ptr()) + g.offset, res, reinterpret_cast<unsigned long long*>(flag.data<int64_t>()));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace vitddp::cuda
