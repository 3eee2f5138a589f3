#include "framework/cuda/check.h"
#include "framework/cuda/op_profiler.h"
#include "framework/cuda/dispatch.cuh"
#include "framework/cuda/elementwise.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/stream.h"
#include "framework/cuda/strided_index.cuh"

#include <cstdint>
#include <type_traits>

namespace vitddp::cuda {
namespace {

template <typename T>
__global__ void add_inplace_kernel(T* dst, StridedIndex dst_index, const T* src, StridedIndex src_index,
                                   double alpha, int64_t n) {
  VITDDP_GRID_STRIDE_LOOP(i, n) {
    T& out = dst[dst_index.offset(i)];
    out = from_double<T>(to_double(out) + alpha * to_double(src[src_index.offset(i)]));
  }
}

template <typename T, bool kMul>
__global__ void binary_kernel(const T* a, StridedIndex a_index, const T* b, StridedIndex b_index, T* out, int64_t n) {
  VITDDP_GRID_STRIDE_LOOP(i, n) {
    float x = to_f(a[a_index.offset(i)]), y = to_f(b[b_index.offset(i)]);
    out[i] = from_f<T>(kMul ? x * y : x + y);
  }
}

template <typename T>
__global__ void scale_kernel(const T* x, StridedIndex x_index, float factor, T* out, int64_t n) {
  VITDDP_GRID_STRIDE_LOOP(i, n) out[i] = from_f<T>(to_f(x[x_index.offset(i)]) * factor);
}

// Contiguous, 16-byte aligned operands of one shape (residual adds, gradient accumulation: the
// common case) go through 16-byte words; the strided kernels above read 2 bytes at a time.
template <typename T>
constexpr int kPerWord = 16 / sizeof(T);

// out = a + alpha * b over n elements (n a multiple of the word), all contiguous and aligned.
template <typename T>
__global__ void add_words_kernel(const T* a, const T* b, float alpha, T* out, int64_t n) {
  constexpr int V = kPerWord<T>;
  VITDDP_GRID_STRIDE_LOOP(i, n / V) {
    float x[V], y[V];
    load_pack<V>(a, i, x);
    load_pack<V>(b, i, y);
#pragma unroll
    for (int e = 0; e < V; ++e) x[e] = x[e] + alpha * y[e];
    store_pack<V>(out, i, x);
  }
}

bool word_aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Whether add_words_kernel takes these tensors.
template <typename T>
bool add_by_words(const Tensor& a, const Tensor& b, const Tensor& out) {
  return a.is_contiguous() && b.is_contiguous() && out.is_contiguous() && a.shape() == out.shape() &&
         b.shape() == out.shape() && out.numel() % kPerWord<T> == 0 && word_aligned(a.data_ptr()) &&
         word_aligned(b.data_ptr()) && word_aligned(out.data_ptr());
}

template <typename T>
void launch_add_words(const Tensor& a, const Tensor& b, double alpha, const Tensor& out) {
  const int64_t n = out.numel();
  add_words_kernel<T><<<grid_for(n / kPerWord<T>), kThreads, 0, current_stream()>>>(
      static_cast<const T*>(a.data_ptr()), static_cast<const T*>(b.data_ptr()), static_cast<float>(alpha),
      static_cast<T*>(out.data_ptr()), n);
  CUDA_CHECK_LAUNCH();
}

// The index of `t` seen through out's shape: stride 0 along broadcast dims.
StridedIndex broadcast_index(const Tensor& t, const Shape& out_shape) {
  Shape strides(out_shape.size(), 0);
  const size_t lead = out_shape.size() - t.shape().size();
  for (size_t d = lead; d < out_shape.size(); ++d) {
    int64_t size = t.shape()[d - lead];
    strides[d] = (size == 1 && out_shape[d] != 1) ? 0 : t.strides()[d - lead];
  }
  return make_strided_index(out_shape, strides);
}

}  // namespace

void add_inplace(const Tensor& dst, const Tensor& src, double alpha) {
  OpScope scope("add_inplace");
  const int64_t n = dst.numel();
  if (n == 0) return;
  dispatch_cuda_dtype(dst.dtype(), [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>) {
      if (add_by_words<T>(dst, src, dst)) return launch_add_words<T>(dst, src, alpha, dst);
    }
    add_inplace_kernel<T><<<grid_for(n), kThreads, 0, current_stream()>>>(
        static_cast<T*>(dst.data_ptr()), make_strided_index(dst), static_cast<const T*>(src.data_ptr()),
        make_strided_index(src), alpha, n);
    CUDA_CHECK_LAUNCH();
  });
}

void add_gradients(const Tensor& a, const Tensor& b, const Tensor& out) {
  OpScope scope("add_gradients");
  cuda::binary_forward(cpu::BinaryOp::kAdd, a, b, out);  // qualified: cpu::binary_forward matches by ADL too
}

void binary_forward(cpu::BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  StridedIndex ai = broadcast_index(a, out.shape()), bi = broadcast_index(b, out.shape());
  dispatch_floating(out.dtype(), op == cpu::BinaryOp::kMul ? "mul" : "add", [&](auto zero) {
    using T = decltype(zero);
    if (op == cpu::BinaryOp::kAdd && add_by_words<T>(a, b, out)) return launch_add_words<T>(a, b, 1.0, out);
    if (op == cpu::BinaryOp::kMul)
      binary_kernel<T, true><<<grid_for(n), kThreads, 0, current_stream()>>>(
          static_cast<const T*>(a.data_ptr()), ai, static_cast<const T*>(b.data_ptr()), bi, out.data<T>(), n);
    else
      binary_kernel<T, false><<<grid_for(n), kThreads, 0, current_stream()>>>(
          static_cast<const T*>(a.data_ptr()), ai, static_cast<const T*>(b.data_ptr()), bi, out.data<T>(), n);
    CUDA_CHECK_LAUNCH();
  });
}

void scale_forward(const Tensor& x, double factor, const Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_floating(out.dtype(), "scale", [&](auto zero) {
    using T = decltype(zero);
    scale_kernel<T><<<grid_for(n), kThreads, 0, current_stream()>>>(
        static_cast<const T*>(x.data_ptr()), make_strided_index(x), static_cast<float>(factor), out.data<T>(), n);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace vitddp::cuda
