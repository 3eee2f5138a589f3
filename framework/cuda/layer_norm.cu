#include "framework/cuda/check.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/layer_norm.h"
#include "framework/cuda/stream.h"

#include <cstdint>
#include <initializer_list>

namespace vitddp::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

// One warp per row; two passes over the row (mean, then centred variance) for accuracy.
template <typename T>
__global__ void layer_norm_forward_kernel(const T* x, const T* w, const T* b, float eps, T* y, float* mean_out,
                                          float* rstd_out, int64_t rows, int64_t d) {
  const int64_t row = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* xr = x + row * d;
  float s = 0.0f;
  for (int64_t c = lane; c < d; c += 32) s += to_f(xr[c]);
  const float mean = warp_sum(s) / d;
  float v = 0.0f;
  for (int64_t c = lane; c < d; c += 32) {
    float t = to_f(xr[c]) - mean;
    v += t * t;
  }
  const float rstd = rsqrtf(warp_sum(v) / d + eps);
  T* yr = y + row * d;
  for (int64_t c = lane; c < d; c += 32) yr[c] = from_f<T>((to_f(xr[c]) - mean) * rstd * to_f(w[c]) + to_f(b[c]));
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w; one warp per row.
template <typename T>
__global__ void layer_norm_dx_kernel(const T* x, const T* w, const float* mean, const float* rstd, const T* dy,
                                     const T* dx_add, T* dx, int64_t rows, int64_t d) {
  const int64_t row = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* xr = x + row * d;
  const T* gr = dy + row * d;
  const float mu = mean[row], rs = rstd[row];
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int64_t c = lane; c < d; c += 32) {
    float g = to_f(gr[c]) * to_f(w[c]);
    sum_g += g;
    sum_gx += g * (to_f(xr[c]) - mu) * rs;
  }
  sum_g = warp_sum(sum_g) / d;
  sum_gx = warp_sum(sum_gx) / d;
  T* out = dx + row * d;
  for (int64_t c = lane; c < d; c += 32) {
    float g = to_f(gr[c]) * to_f(w[c]);
    float xhat = (to_f(xr[c]) - mu) * rs;
    float v = rs * (g - sum_g - xhat * sum_gx);
    // Rounded, then added (no FMA): the sum add_gradients would have made, bit for bit in f32.
    if (dx_add) v = __fadd_rn(v, to_f(dx_add[row * d + c]));
    out[c] = from_f<T>(v);
  }
}

// Vectorised row kernels for rows of up to 32 floats per lane (d <= 1024): one warp per row
// holds its row in registers, loaded once in 16-byte words, so each element is read from
// memory once (the scalar kernels above read it two or three times, 2 bytes at a time).
// Taken when d is a multiple of the word's elements and every pointer is 16-byte aligned.
template <typename T>
constexpr int kPerWord = 16 / sizeof(T);
template <typename T>
constexpr int kWordsPerLane = 32 / kPerWord<T>;  // 32 floats of registers per row operand

// kAdd (add_layer_norm_forward): the row is x + x2, rounded to T, stored to sum_out and then
// normalised: the values an add and a layer norm would have made, with one read of the sum less.
template <typename T, bool kAdd = false>
__global__ void layer_norm_forward_vec_kernel(const T* x, const T* w, const T* b, float eps, T* y, float* mean_out,
                                              float* rstd_out, int64_t rows, int64_t d, const T* x2 = nullptr,
                                              T* sum_out = nullptr) {
  constexpr int V = kPerWord<T>, K = kWordsPerLane<T>;
  const int64_t row = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int words = static_cast<int>(d / V);
  const T* xr = x + row * d;  // word j: load_pack<V>(xr, j, ...), 16 bytes
  float v[K][V];
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int j = lane + 32 * k;
    if (j < words) {
      load_pack<V>(xr, j, v[k]);
      if constexpr (kAdd) {
        float u[V];
        load_pack<V>(x2 + row * d, j, u);
#pragma unroll
        for (int i = 0; i < V; ++i) v[k][i] = to_f(from_f<T>(v[k][i] + u[i]));
        store_pack<V>(sum_out + row * d, j, v[k]);
      }
#pragma unroll
      for (int i = 0; i < V; ++i) s += v[k][i];
    }
  }
  const float mean = warp_sum(s) / d;
  float var = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (lane + 32 * k < words)
#pragma unroll
      for (int i = 0; i < V; ++i) var += (v[k][i] - mean) * (v[k][i] - mean);
  const float rstd = rsqrtf(warp_sum(var) / d + eps);
  T* yr = y + row * d;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int j = lane + 32 * k;
    if (j >= words) continue;
    float wf[V], bf[V], out[V];
    load_pack<V>(w, j, wf);
    load_pack<V>(b, j, bf);
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = (v[k][i] - mean) * rstd * wf[i] + bf[i];
    store_pack<V>(yr, j, out);
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// Note [Layer norm backward in one pass]
// The vectorised dx kernel already holds a row's dy and xhat in registers; the weight and bias
// gradients (column sums of dy * xhat and of dy) come from the same registers instead of a
// second kernel that reads x and dy again. Every warp stores its row's products into its own
// row of shared memory (16-byte stores), then each thread adds one column over the block's
// warps in warp order (the same sums in every run) and the block writes one partial row per
// gradient; layer_norm_dwdb_blocks_kernel adds the blocks' partials in order. (A first version
// let the warps add into one shared row in turns: one warp busy at a time, and 8-way bank
// conflicts from the lanes' 8-column strides in bf16 made it slower than two kernels.) Without
// `partials` (no weight or bias gradient wanted) it is the dx kernel alone.
template <typename T>
__global__ void layer_norm_backward_vec_kernel(const T* x, const T* w, const float* mean, const float* rstd,
                                               const T* dy, const T* dx_add, T* dx, int64_t rows, int64_t d,
                                               float* partials) {
  constexpr int V = kPerWord<T>, K = kWordsPerLane<T>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t(kWarpsPerBlock) + warp;
  const int words = static_cast<int>(d / V);
  // dy and xhat of the row stay in registers for dx and for the column sums (no separate
  // accumulators: the kernel keeps the dx kernel's register budget). A warp past the last row
  // adds zeros.
  float g[K][V], xhat[K][V];
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int i = 0; i < V; ++i) g[k][i] = xhat[k][i] = 0.0f;
  if (row < rows) {
    const T* xr = x + row * d;
    const T* gr = dy + row * d;
    const float mu = mean[row], rs = rstd[row];
    float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int j = lane + 32 * k;
      if (j >= words) continue;
      float wf[V];
      load_pack<V>(gr, j, g[k]);
      load_pack<V>(xr, j, xhat[k]);
      load_pack<V>(w, j, wf);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        xhat[k][i] = (xhat[k][i] - mu) * rs;
        const float gw = g[k][i] * wf[i];
        sum_g += gw;
        sum_gx += gw * xhat[k][i];
      }
    }
    sum_g = warp_sum(sum_g) / d;
    sum_gx = warp_sum(sum_gx) / d;
    T* out = dx + row * d;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int j = lane + 32 * k;
      if (j >= words) continue;
      float wf[V], o[V];
      load_pack<V>(w, j, wf);  // from L1: the weight row is the same for every warp
#pragma unroll
      for (int i = 0; i < V; ++i) o[i] = rs * (g[k][i] * wf[i] - sum_g - xhat[k][i] * sum_gx);
      if (dx_add) {  // rounded, then added (no FMA): the sum add_gradients would have made
        float base[V];
        load_pack<V>(dx_add + row * d, j, base);
#pragma unroll
        for (int i = 0; i < V; ++i) o[i] = __fadd_rn(o[i], base[i]);
      }
      store_pack<V>(out, j, o);
    }
  }
  if (!partials) return;  // the same for the whole block: no barrier is left waiting
  // One gradient at a time through one buffer (32 KB: static shared memory suffices).
  __shared__ __align__(16) float rows_of_warps[kWarpsPerBlock][32 * V * K];
  for (int which = 0; which < 2; ++which) {  // 0: dw's dy * xhat, 1: db's dy
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int j = lane + 32 * k;
      if (j >= words) continue;
#pragma unroll
      for (int h = 0; h < V; h += 4) {
        float4 four;
        four.x = which == 0 ? g[k][h] * xhat[k][h] : g[k][h];
        four.y = which == 0 ? g[k][h + 1] * xhat[k][h + 1] : g[k][h + 1];
        four.z = which == 0 ? g[k][h + 2] * xhat[k][h + 2] : g[k][h + 2];
        four.w = which == 0 ? g[k][h + 3] * xhat[k][h + 3] : g[k][h + 3];
        *reinterpret_cast<float4*>(&rows_of_warps[warp][j * V + h]) = four;
      }
    }
    __syncthreads();
    for (int64_t col = threadIdx.x; col < d; col += blockDim.x) {
      float total = 0.0f;
#pragma unroll
      for (int w8 = 0; w8 < kWarpsPerBlock; ++w8) total += rows_of_warps[w8][col];
      partials[(which * int64_t(gridDim.x) + blockIdx.x) * d + col] = total;
    }
    __syncthreads();
  }
}

// dw[c], db[c] := the sums over `chunks` partial rows (2, chunks, d). Blocks of 32 columns x
// kChunkLanes lanes: lane y adds chunks y, y + kChunkLanes, ... in order, then one warp adds the
// lanes in order, so the sums are the same in every run. 32 lanes rather than 8: the one-pass
// backward leaves one partial row per block of 8 rows (200 for ViT-L's 1600 rows).
constexpr int kChunkLanes = 32;

template <typename T>
__global__ void __launch_bounds__(32 * kChunkLanes) layer_norm_dwdb_blocks_kernel(const float* partials, int64_t chunks, int64_t d, T* dw, T* db,
                                              bool accumulate) {
  __shared__ float pw[kChunkLanes][33], pb[kChunkLanes][33];
  const int64_t col = blockIdx.x * 32 + threadIdx.x;
  float tw = 0.0f, tb = 0.0f;
  if (col < d) {
#pragma unroll 4
    for (int64_t c = threadIdx.y; c < chunks; c += kChunkLanes) {
      tw += partials[c * d + col];
      tb += partials[(chunks + c) * d + col];
    }
  }
  pw[threadIdx.y][threadIdx.x] = tw;
  pb[threadIdx.y][threadIdx.x] = tb;
  __syncthreads();
  if (threadIdx.y != 0 || col >= d) return;
  tw = tb = 0.0f;
  for (int y = 0; y < kChunkLanes; ++y) {
    tw += pw[y][threadIdx.x];
    tb += pb[y][threadIdx.x];
  }
  if (dw) dw[col] = from_f<T>(accumulate ? to_f(dw[col]) + tw : tw);
  if (db) db[col] = from_f<T>(accumulate ? to_f(db[col]) + tb : tb);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Whether the vectorised kernels take rows of `d` elements of T at these pointers.
template <typename T>
bool vectorizable(int64_t d, std::initializer_list<const void*> pointers) {
  if (d % kPerWord<T> != 0 || d > 32 * kPerWord<T> * kWordsPerLane<T>) return false;
  for (const void* p : pointers)
    if (!aligned16(p)) return false;
  return true;
}

// dw[c] = sum_r dy * xhat, db[c] = sum_r dy in two deterministic stages (see reduce.cu's
// column sums): blocks of (32 columns x 8 row lanes) over chunks of rows write partials
// (2, chunks, d); layer_norm_dwdb_blocks_kernel then adds the chunks in a fixed order.
template <typename T>
__global__ void layer_norm_dwdb_partials_kernel(const T* x, const float* mean, const float* rstd, const T* dy,
                                                int64_t rows, int64_t d, int64_t rows_per_chunk, float* partials) {
  __shared__ float pw[8][33], pb[8][33];
  const int64_t col = blockIdx.x * 32 + threadIdx.x;
  const int64_t begin = blockIdx.y * rows_per_chunk, end = min(rows, begin + rows_per_chunk);
  float aw = 0.0f, ab = 0.0f;
  if (col < d) {
    for (int64_t r = begin + threadIdx.y; r < end; r += 8) {
      float g = to_f(dy[r * d + col]);
      aw += g * (to_f(x[r * d + col]) - mean[r]) * rstd[r];
      ab += g;
    }
  }
  pw[threadIdx.y][threadIdx.x] = aw;
  pb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && col < d) {
    float tw = 0.0f, tb = 0.0f;
    for (int y = 0; y < 8; ++y) {
      tw += pw[y][threadIdx.x];
      tb += pb[y][threadIdx.x];
    }
    partials[blockIdx.y * d + col] = tw;
    partials[(gridDim.y + blockIdx.y) * d + col] = tb;
  }
}

}  // namespace

void layer_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps, const Tensor& y,
                        const Tensor& mean, const Tensor& rstd) {
  const int64_t d = x.size(-1), rows = x.numel() / d;
  if (rows == 0) return;
  dispatch_floating(x.dtype(), "layer_norm", [&](auto zero) {
    using T = decltype(zero);
    unsigned blocks = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
    if (vectorizable<T>(d, {x.data<T>(), w.data<T>(), b.data<T>(), y.data<T>()})) {
      layer_norm_forward_vec_kernel<T><<<blocks, kWarpsPerBlock * 32, 0, current_stream()>>>(
          x.data<T>(), w.data<T>(), b.data<T>(), static_cast<float>(eps), y.data<T>(), mean.data<float>(),
          rstd.data<float>(), rows, d);
    } else {
      layer_norm_forward_kernel<T><<<blocks, kWarpsPerBlock * 32, 0, current_stream()>>>(
          x.data<T>(), w.data<T>(), b.data<T>(), static_cast<float>(eps), y.data<T>(), mean.data<float>(),
          rstd.data<float>(), rows, d);
    }
    CUDA_CHECK_LAUNCH();
  });
}

bool add_layer_norm_fits(const Tensor& a, const Tensor& a2, const Tensor& w, const Tensor& b) {
  const int64_t d = a.size(-1);
  bool fits = false;
  dispatch_floating(a.dtype(), "add_layer_norm", [&](auto zero) {
    using T = decltype(zero);
    fits = a.numel() > 0 && vectorizable<T>(d, {a.data<T>(), a2.data<T>(), w.data<T>(), b.data<T>()});
  });
  return fits;
}

bool add_layer_norm_forward(const Tensor& a, const Tensor& a2, const Tensor& w, const Tensor& b, double eps,
                            const Tensor& sum, const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  const int64_t d = a.size(-1), rows = a.numel() / d;
  bool done = false;
  dispatch_floating(a.dtype(), "add_layer_norm", [&](auto zero) {
    using T = decltype(zero);
    if (rows == 0 || !vectorizable<T>(d, {a.data<T>(), a2.data<T>(), w.data<T>(), b.data<T>(), y.data<T>(),
                                          sum.data<T>()}))
      return;
    const unsigned blocks = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
    layer_norm_forward_vec_kernel<T, true><<<blocks, kWarpsPerBlock * 32, 0, current_stream()>>>(
        a.data<T>(), w.data<T>(), b.data<T>(), static_cast<float>(eps), y.data<T>(), mean.data<float>(),
        rstd.data<float>(), rows, d, a2.data<T>(), sum.data<T>());
    CUDA_CHECK_LAUNCH();
    done = true;
  });
  return done;
}

void layer_norm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                         const Tensor& dx, const Tensor& dw, const Tensor& db, GradWrite weight_grads,
                         const Tensor& dx_add) {
  const int64_t d = x.size(-1), rows = x.numel() / d;
  dispatch_floating(x.dtype(), "layer_norm backward", [&](auto zero) {
    using T = decltype(zero);
    const unsigned blocks = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
    const bool param_grads = dw.defined() || db.defined();
    T* dw_out = dw.defined() ? dw.data<T>() : nullptr;
    T* db_out = db.defined() ? db.data<T>() : nullptr;
    const bool accumulate = weight_grads == GradWrite::kAccumulate;
    const T* add = dx_add.defined() ? dx_add.data<T>() : nullptr;
    if (dx.defined() && rows > 0 &&
        vectorizable<T>(d, {x.data<T>(), w.data<T>(), dy.data<T>(), dx.data<T>(), add ? add : dx.data<T>()})) {
      // One pass: see Note [Layer norm backward in one pass].
      Tensor partials;
      if (param_grads) partials = Tensor::empty({2, static_cast<int64_t>(blocks), d}, DType::kF32, x.device());
      layer_norm_backward_vec_kernel<T><<<blocks, kWarpsPerBlock * 32, 0, current_stream()>>>(
          x.data<T>(), w.data<T>(), mean.data<float>(), rstd.data<float>(), dy.data<T>(), add, dx.data<T>(), rows, d,
          param_grads ? partials.data<float>() : nullptr);
      CUDA_CHECK_LAUNCH();
      if (param_grads) {
        layer_norm_dwdb_blocks_kernel<T><<<static_cast<unsigned>((d + 31) / 32), dim3(32, kChunkLanes), 0,
                                           current_stream()>>>(
            partials.data<float>(), blocks, d, dw_out, db_out, accumulate);
        CUDA_CHECK_LAUNCH();
      }
      return;
    }
    if (dx.defined() && rows > 0) {
      layer_norm_dx_kernel<T><<<blocks, kWarpsPerBlock * 32, 0, current_stream()>>>(
          x.data<T>(), w.data<T>(), mean.data<float>(), rstd.data<float>(), dy.data<T>(), add, dx.data<T>(), rows, d);
      CUDA_CHECK_LAUNCH();
    }
    if (param_grads) {
      const int64_t col_blocks = (d + 31) / 32;
      const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(std::max<int64_t>(1, 512 / col_blocks), (rows + 31) / 32));
      const int64_t per_chunk = (rows + chunks - 1) / chunks;
      Tensor partials = Tensor::empty({2, chunks, d}, DType::kF32, x.device());
      dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(chunks));
      layer_norm_dwdb_partials_kernel<T><<<grid, dim3(32, 8), 0, current_stream()>>>(
          x.data<T>(), mean.data<float>(), rstd.data<float>(), dy.data<T>(), rows, d, per_chunk, partials.data<float>());
      CUDA_CHECK_LAUNCH();
      layer_norm_dwdb_blocks_kernel<T><<<static_cast<unsigned>(col_blocks), dim3(32, kChunkLanes), 0,
                                         current_stream()>>>(
          partials.data<float>(), chunks, d, dw_out, db_out, accumulate);
      CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace vitddp::cuda
