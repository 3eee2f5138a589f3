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

// One block per row: row_loss[r] = logsumexp(x_r) - x_r[label_r].
template <typename T>
__global__ void row_loss_kernel(const T* logits, const int64_t* labels, int64_t c, float* row_loss) {
  const int64_t r = blockIdx.x;
  const T* x = logits + r * c;
  const float2 stats = row_max_and_sum_exp(x, c);
  const float mx = stats.x, s = stats.y;
  if (threadIdx.x == 0) {
    const int64_t label = labels[r];
    row_loss[r] = (label < 0 || label >= c) ? NAN : logf(s) + mx - to_f(x[label]);
  }
}

template <typename T>
__global__ void mean_kernel(const float* row_loss, int64_t rows, T* loss) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    double total = 0;
    for (int64_t r = 0; r < rows; ++r) total += row_loss[r];
    loss[0] = from_f<T>(static_cast<float>(total / rows));
  }
}

// One block per row: d = (softmax(x) - onehot) * dloss / B.
template <typename T>
__global__ void cross_entropy_backward_kernel(const T* logits, const int64_t* labels, const T* dloss, int64_t rows,
                                              int64_t c, T* dlogits) {
  const int64_t r = blockIdx.x;
  const T* x = logits + r * c;
  const float2 stats = row_max_and_sum_exp(x, c);
  const float mx = stats.x, s = stats.y;
  const float g = to_f(dloss[0]) / rows, inv = 1.0f / s;
  const int64_t label = labels[r];
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    dlogits[r * c + j] = from_f<T>((expf(to_f(x[j]) - mx) * inv - (j == label ? 1.0f : 0.0f)) * g);
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& labels, const Tensor& loss) {
  const int64_t rows = logits.size(0), c = logits.size(1);
  Tensor row_loss = Tensor::empty({rows}, DType::kF32, logits.device());
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto zero) {
    using T = decltype(zero);
    row_loss_kernel<T><<<static_cast<unsigned>(rows), 256, 0, current_stream()>>>(
        logits.data<T>(), labels.data<int64_t>(), c, row_loss.data<float>());
    CUDA_CHECK_LAUNCH();
    mean_kernel<T><<<1, 32, 0, current_stream()>>>(row_loss.data<float>(), rows, loss.data<T>());
    CUDA_CHECK_LAUNCH();
  });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& dloss, const Tensor& dlogits) {
  const int64_t rows = logits.size(0), c = logits.size(1);
  Tensor g = dloss.to(logits.dtype()).contiguous();
  dispatch_floating(logits.dtype(), "cross_entropy backward", [&](auto zero) {
    using T = decltype(zero);
    cross_entropy_backward_kernel<T><<<static_cast<unsigned>(rows), 256, 0, current_stream()>>>(
        logits.data<T>(), labels.data<int64_t>(), g.data<T>(), rows, c, dlogits.data<T>());
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace vitddp::cuda
