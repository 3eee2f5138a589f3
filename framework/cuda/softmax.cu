#include "framework/cuda/check.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/softmax.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

template <typename T>
__global__ void softmax_rows_kernel(const T* in, T* out, int64_t rows, int64_t cols) {
  const int64_t row = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* x = in + row * cols;
  T* y = out + row * cols;
  float m = -INFINITY;
  for (int64_t c = lane; c < cols; c += 32) m = fmaxf(m, to_f(x[c]));
  m = warp_max(m);
  float s = 0.0f;
  for (int64_t c = lane; c < cols; c += 32) s += expf(to_f(x[c]) - m);
  s = warp_sum(s);
  const float inv = 1.0f / s;
  for (int64_t c = lane; c < cols; c += 32) y[c] = from_f<T>(expf(to_f(x[c]) - m) * inv);
}

template <typename T>
__global__ void softmax_rows_backward_kernel(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols, float scale) {
  const int64_t row = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* yr = y + row * cols;
  const T* gr = dy + row * cols;
  T* out = dx + row * cols;
  float dot = 0.0f;
  for (int64_t c = lane; c < cols; c += 32) dot += to_f(yr[c]) * to_f(gr[c]);
  dot = warp_sum(dot);
  for (int64_t c = lane; c < cols; c += 32) out[c] = from_f<T>(scale * to_f(yr[c]) * (to_f(gr[c]) - dot));
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

void softmax_rows(const void* in, void* out, DType dtype, int64_t rows, int64_t cols) {
  if (rows == 0) return;
  dispatch_floating(dtype, "softmax", [&](auto zero) {
    using T = decltype(zero);
    softmax_rows_kernel<T><<<row_blocks(rows), kWarpsPerBlock * 32, 0, current_stream()>>>(
        static_cast<const T*>(in), static_cast<T*>(out), rows, cols);
    CUDA_CHECK_LAUNCH();
  });
}

void softmax_rows_backward(const void* y, const void* dy, void* dx, DType dtype, int64_t rows, int64_t cols,
                           float scale) {
  if (rows == 0) return;
  dispatch_floating(dtype, "softmax backward", [&](auto zero) {
    using T = decltype(zero);
    softmax_rows_backward_kernel<T><<<row_blocks(rows), kWarpsPerBlock * 32, 0, current_stream()>>>(
        static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx), rows, cols, scale);
    CUDA_CHECK_LAUNCH();
  });
}

void softmax_forward(const Tensor& x, const Tensor& y) {
  const int64_t cols = x.dim() ? x.size(-1) : 1;
  softmax_rows(x.data_ptr(), y.data_ptr(), x.dtype(), cols ? x.numel() / cols : 0, cols);
}

void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  const int64_t cols = y.dim() ? y.size(-1) : 1;
  softmax_rows_backward(y.data_ptr(), dy.data_ptr(), dx.data_ptr(), y.dtype(), cols ? y.numel() / cols : 0, cols);
}

}  // namespace vitddp::cuda
