#include "framework/cuda/check.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/reduce.h"
#include "framework/cuda/stream.h"
#include "framework/cuda/strided_index.cuh"

namespace vitddp::cuda {
namespace {

constexpr int kPartials = 256;

template <typename T>
__global__ void partial_sums_kernel(const T* x, StridedIndex index, int64_t n, double* partials) {
  __shared__ float scratch[32];
  float acc = 0.0f;
  VITDDP_GRID_STRIDE_LOOP(i, n) acc += to_f(x[index.offset(i)]);
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

template <typename T>
__global__ void finish_sum_kernel(const double* partials, int count, double factor, T* out) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    double total = 0;
    for (int i = 0; i < count; ++i) total += partials[i];
    out[0] = from_f<T>(static_cast<float>(total * factor));
  }
}

// Each thread owns one output element and walks the reduced index space in a fixed order.
template <typename T>
__global__ void sum_to_shape_kernel(const T* x, StridedIndex kept, StridedIndex reduced, int64_t reduce_count,
                                    T* out, int64_t n_out) {
  VITDDP_GRID_STRIDE_LOOP(o, n_out) {
    const T* base = x + kept.offset(o);
    float acc = 0.0f;
    for (int64_t r = 0; r < reduce_count; ++r) acc += to_f(base[reduced.offset(r)]);
    out[o] = from_f<T>(acc);
  }
}

// Block (32, 8): 32 columns per block, 8 row lanes striding over rows, then a shared reduction.
template <typename T>
__global__ void sum_rows_kernel(const T* x, int64_t rows, int64_t cols, T* out, bool accumulate) {
  __shared__ float partial[8][33];
  const int64_t col = blockIdx.x * 32 + threadIdx.x;
  float acc = 0.0f;
  if (col < cols)
    for (int64_t r = threadIdx.y; r < rows; r += 8) acc += to_f(x[r * cols + col]);
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int y = 0; y < 8; ++y) total += partial[y][threadIdx.x];
    out[col] = from_f<T>(accumulate ? to_f(out[col]) + total : total);
  }
}

}  // namespace

void sum_all(const Tensor& x, double factor, const Tensor& out) {
  const int64_t n = x.numel();
  Tensor partials = Tensor::empty({kPartials}, DType::kF64, x.device());
  unsigned blocks = std::min<unsigned>(grid_for(n), kPartials);
  dispatch_floating(x.dtype(), "sum", [&](auto zero) {
    using T = decltype(zero);
    partial_sums_kernel<T><<<blocks, kThreads, 0, current_stream()>>>(
        static_cast<const T*>(x.data_ptr()), make_strided_index(x), n, partials.data<double>());
    CUDA_CHECK_LAUNCH();
    finish_sum_kernel<T><<<1, 32, 0, current_stream()>>>(partials.data<double>(), static_cast<int>(blocks), factor,
                                                         out.data<T>());
    CUDA_CHECK_LAUNCH();
  });
}

void sum_to_shape(const Tensor& x, const Tensor& out) {
  const int rank = static_cast<int>(x.dim());
  VITDDP_CHECK(rank <= StridedIndex::kMaxDims, "sum_to_shape: at most ", StridedIndex::kMaxDims, " dims on CUDA");
  const size_t lead = x.shape().size() - out.shape().size();
  StridedIndex kept, reduced;
  kept.rank = reduced.rank = rank;
  int64_t reduce_count = 1;
  for (int d = 0; d < rank; ++d) {
    bool is_reduced = d < static_cast<int>(lead) || (out.shape()[d - lead] == 1 && x.shape()[d] != 1);
    kept.sizes[d] = is_reduced ? 1 : x.shape()[d];
    kept.strides[d] = is_reduced ? 0 : x.strides()[d];
    reduced.sizes[d] = is_reduced ? x.shape()[d] : 1;
    reduced.strides[d] = is_reduced ? x.strides()[d] : 0;
    if (is_reduced) reduce_count *= x.shape()[d];
  }
  const int64_t n_out = out.numel();
  dispatch_floating(x.dtype(), "sum_to_shape", [&](auto zero) {
    using T = decltype(zero);
    sum_to_shape_kernel<T><<<grid_for(n_out), kThreads, 0, current_stream()>>>(
        static_cast<const T*>(x.data_ptr()), kept, reduced, reduce_count, out.data<T>(), n_out);
    CUDA_CHECK_LAUNCH();
  });
}

void sum_rows(const void* x, DType dtype, int64_t rows, int64_t cols, void* out, bool accumulate) {
  dispatch_floating(dtype, "sum_rows", [&](auto zero) {
    using T = decltype(zero);
    dim3 block(32, 8);
    sum_rows_kernel<T><<<static_cast<unsigned>((cols + 31) / 32), block, 0, current_stream()>>>(
        static_cast<const T*>(x), rows, cols, static_cast<T*>(out), accumulate);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace vitddp::cuda
