#include "framework/cuda/check.h"
#include "framework/cuda/cross_entropy.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {

// The row's max and sum of exp(x - max), reduced over the block (every thread gets both).
template <typename T>
__device__ float2 row_max_and_sum_exp(const T* x, int64_t c) {
  __shared__ float scratch[32];
  __shared__ float row_max;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) m = fmaxf(m, to_f(x[j]));
  m = warp_max(m);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float mm = -INFINITY;
    for (int w = 0; w < (blockDim.x + 31) / 32; ++w) mm = fmaxf(mm, scratch[w]);
    row_max = mm;
  }
  __syncthreads();
  const float mx = row_max;
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) s += expf(to_f(x[j]) - mx);
  return make_float2(mx, block_sum(s, scratch));
}

// A row's smoothed target t'_c = (1 - eps) t_c + eps / C, from a label or a soft row.
template <typename T>
struct RowTarget {
  const int64_t* labels;  // null with soft targets
  const T* soft;          // (B, C), null with labels
  float eps;
  int64_t c;
  __device__ float at(int64_t r, int64_t j) const {
    const float t = labels ? (labels[r] == j ? 1.0f : 0.0f) : to_f(soft[r * c + j]);
    return (1.0f - eps) * t + eps / static_cast<float>(c);
  }
};

// One block per row: row_loss[r] = sum_c t'_c (logsumexp(x_r) - x_rc); NaN for a bad label.
template <typename T>
__global__ void row_loss_kernel(const T* logits, RowTarget<T> t, float* row_loss) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x, c = t.c;
  const T* x = logits + r * c;
  const float2 stats = row_max_and_sum_exp(x, c);
  const float lse = logf(stats.y) + stats.x;
  const bool bad = t.labels && (t.labels[r] < 0 || t.labels[r] >= c);
  float part = 0.0f;
  if (t.labels && t.eps == 0.0f) {
    if (threadIdx.x == 0 && !bad) part = lse - to_f(x[t.labels[r]]);
  } else if (!bad) {
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) part += t.at(r, j) * (lse - to_f(x[j]));
  }
  const float sum = block_sum(part, scratch);
  if (threadIdx.x == 0) row_loss[r] = bad ? NAN : sum;
}

template <typename T>
__global__ void mean_kernel(const float* row_loss, int64_t rows, T* loss) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    double total = 0;
    for (int64_t r = 0; r < rows; ++r) total += row_loss[r];
    loss[0] = from_f<T>(static_cast<float>(total / rows));
  }
}

// One block per row: d = (softmax(x) * sum_c t'_c - t') * dloss / B.
template <typename T>
__global__ void cross_entropy_backward_kernel(const T* logits, RowTarget<T> t, const T* dloss, int64_t rows,
                                              T* dlogits) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x, c = t.c;
  const T* x = logits + r * c;
  const float2 stats = row_max_and_sum_exp(x, c);
  const float mx = stats.x, inv = 1.0f / stats.y;
  const float g = to_f(dloss[0]) / rows;
  float mass = 1.0f;  // sum_c t'_c: 1 for labels
  if (!t.labels) {
    float part = 0.0f;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) part += t.at(r, j);
    mass = block_sum(part, scratch);
  }
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    dlogits[r * c + j] = from_f<T>((expf(to_f(x[j]) - mx) * inv * mass - t.at(r, j)) * g);
}

template <typename T>
RowTarget<T> row_target(const Tensor& target, double eps, int64_t c) {
  const bool hard = target.dtype() == DType::kI64;
  return {hard ? target.data<int64_t>() : nullptr, hard ? nullptr : target.data<T>(), static_cast<float>(eps), c};
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& target, double eps, const Tensor& loss) {
  const int64_t rows = logits.size(0), c = logits.size(1);
  Tensor row_loss = Tensor::empty({rows}, DType::kF32, logits.device());
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto zero) {
    using T = decltype(zero);
    row_loss_kernel<T><<<static_cast<unsigned>(rows), 256, 0, current_stream()>>>(
        logits.data<T>(), row_target<T>(target, eps, c), row_loss.data<float>());
    CUDA_CHECK_LAUNCH();
    mean_kernel<T><<<1, 32, 0, current_stream()>>>(row_loss.data<float>(), rows, loss.data<T>());
    CUDA_CHECK_LAUNCH();
  });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& target, double eps, const Tensor& dloss,
                            const Tensor& dlogits) {
  const int64_t rows = logits.size(0), c = logits.size(1);
  Tensor g = dloss.to(logits.dtype()).contiguous();
  dispatch_floating(logits.dtype(), "cross_entropy backward", [&](auto zero) {
    using T = decltype(zero);
    cross_entropy_backward_kernel<T><<<static_cast<unsigned>(rows), 256, 0, current_stream()>>>(
        logits.data<T>(), row_target<T>(target, eps, c), g.data<T>(), rows, dlogits.data<T>());
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace vitddp::cuda
