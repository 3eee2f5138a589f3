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

// Column sums in two deterministic stages, so tall matrices use the whole GPU: blocks of
// (32 columns x 8 row lanes) each sum one chunk of rows into partials (chunks, cols); then one
// thread per column adds the chunks in order.
template <typename T>
__global__ void column_partials_kernel(const T* x, int64_t rows, int64_t cols, int64_t rows_per_chunk,
                                       float* partials) {
  __shared__ float partial[8][33];
  const int64_t col = blockIdx.x * 32 + threadIdx.x;
  const int64_t begin = blockIdx.y * rows_per_chunk, end = min(rows, begin + rows_per_chunk);
  float acc = 0.0f;
  if (col < cols)
    for (int64_t r = begin + threadIdx.y; r < end; r += 8) acc += to_f(x[r * cols + col]);
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int y = 0; y < 8; ++y) total += partial[y][threadIdx.x];
    partials[blockIdx.y * cols + col] = total;
  }
}

template <typename T>
__global__ void column_finish_kernel(const float* partials, int64_t chunks, int64_t cols, T* out, bool accumulate) {
  VITDDP_GRID_STRIDE_LOOP(col, cols) {
    float total = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) total += partials[c * cols + col];
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

int64_t column_chunks(int64_t rows, int64_t cols) {
  // Enough blocks to fill the GPU (about 4 per SM on 132 SMs), chunks of at least 32 rows.
  int64_t col_blocks = (cols + 31) / 32;
  int64_t want = std::max<int64_t>(1, 512 / col_blocks);
  return std::max<int64_t>(1, std::min<int64_t>(want, (rows + 31) / 32));
}

void sum_rows(const void* x, DType dtype, int64_t rows, int64_t cols, void* out, bool accumulate) {
  if (cols == 0) return;
  const int64_t chunks = column_chunks(rows, cols), per_chunk = (rows + chunks - 1) / chunks;
  Tensor partials = Tensor::empty({chunks, cols}, DType::kF32, Device::cuda(current_device()));
  dispatch_floating(dtype, "sum_rows", [&](auto zero) {
    using T = decltype(zero);
    dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(chunks));
    column_partials_kernel<T><<<grid, dim3(32, 8), 0, current_stream()>>>(static_cast<const T*>(x), rows, cols,
                                                                           per_chunk, partials.data<float>());
    CUDA_CHECK_LAUNCH();
    column_finish_kernel<T><<<grid_for(cols), kThreads, 0, current_stream()>>>(partials.data<float>(), chunks, cols,
                                                                               static_cast<T*>(out), accumulate);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace vitddp::cuda
