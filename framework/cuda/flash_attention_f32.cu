#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "framework/core/error.h"
#include "framework/cuda/check.h"
#include "framework/cuda/flash_attention_f32.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {

// 256 threads as a 16 x 16 grid (ty, tx). A thread's rows of a tile are ty + 16 i, its columns
// of a score tile tx + 16 j, so a warp (two ty) reads two rows of one operand (a broadcast) and
// sixteen of the other. Its columns of a (rows, D) result are the four at 4 tx of each 64-wide
// group, then tx of a last 16 (D = 80): 16-byte shared-memory reads on both sides.
constexpr int kThreads = 256;
constexpr int kFwdRows = 64;  // queries per forward block
constexpr int kFwdKeys = 32;  // keys per forward tile
constexpr int kBwdKeys = 64;  // keys per backward block
constexpr int kBwdRows = 32;  // queries per backward tile

template <int D>
struct Head {
  static constexpr int kStride = D + 4;  // a tile row: 16-byte aligned, its 16-byte words spread over the banks
  static constexpr int kGroups = D / 64;
  static constexpr int kTail = (D % 64) / 16;  // 0, or 1 for a last 16 columns
  static constexpr int kCols = 4 * kGroups + kTail;
  static_assert(D % 64 == 0 || D % 64 == 16, "head dims 64, 80, 128");
  // Column of a thread's output element cc (of kCols).
  __device__ static int col(int cc, int tx) { return cc < 4 * kGroups ? 64 * (cc / 4) + 4 * tx + cc % 4 : 64 * kGroups + tx; }
};

__device__ __forceinline__ float dot4(const float4 a, const float4 b, float acc) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  return fmaf(a.w, b.w, acc);
}
__device__ __forceinline__ float at(const float4 v, int u) { return u == 0 ? v.x : u == 1 ? v.y : u == 2 ? v.z : v.w; }

// Rows [0, rows) of a (rows, D) operand whose row r starts at src + r * row_stride, zeros past
// `valid`, into a tile of Head<D>::kStride per row.
template <int D>
__device__ void load_rows(const float* __restrict__ src, int64_t row_stride, int valid, int rows, float* tile) {
  constexpr int kWords = D / 4;
  for (int idx = threadIdx.x; idx < rows * kWords; idx += kThreads) {
    const int r = idx / kWords, w = idx % kWords;
    const float4 v = r < valid ? __ldg(reinterpret_cast<const float4*>(src + r * row_stride) + w)
                               : make_float4(0.f, 0.f, 0.f, 0.f);
    *reinterpret_cast<float4*>(tile + r * Head<D>::kStride + 4 * w) = v;
  }
}

// Row r's columns of this thread (Head::col) from a tile, into v.
template <int D>
__device__ __forceinline__ void load_cols(const float* tile, int r, int tx, float (&v)[Head<D>::kCols]) {
  using H = Head<D>;
#pragma unroll
  for (int g = 0; g < H::kGroups; ++g) {
    const float4 x = *reinterpret_cast<const float4*>(tile + r * H::kStride + 64 * g + 4 * tx);
    v[4 * g] = x.x, v[4 * g + 1] = x.y, v[4 * g + 2] = x.z, v[4 * g + 3] = x.w;
  }
  if (H::kTail) v[H::kCols - 1] = tile[r * H::kStride + 64 * H::kGroups + tx];
}

__device__ __forceinline__ float half_warp_max(float v) {
  for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float half_warp_sum(float v) {
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One block per (64 queries, head, batch element).
template <int D>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(const float* __restrict__ qkv, float* __restrict__ out,
                                                                 float* __restrict__ lse, int n, int heads, float scale) {
  using H = Head<D>;
  constexpr int kP = kFwdKeys + 4;
  extern __shared__ __align__(16) float smem[];
  float* qs = smem;
  float* ks = qs + kFwdRows * H::kStride;
  float* vs = ks + kFwdKeys * H::kStride;
  float* ps = vs + kFwdKeys * H::kStride;  // (kFwdRows, kP): this tile's probabilities
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const int q0 = blockIdx.x * kFwdRows;
  const int64_t h = blockIdx.y, b = blockIdx.z, dm = int64_t(heads) * D, row_stride = 3 * dm;
  const float* q_base = qkv + b * n * row_stride + h * D;  // k at + dm, v at + 2 dm
  const int q_valid = min(kFwdRows, n - q0);
  load_rows<D>(q_base + q0 * row_stride, row_stride, q_valid, kFwdRows, qs);

  float m[4], l[4], o[4][H::kCols];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY, l[i] = 0.f;
#pragma unroll
    for (int cc = 0; cc < H::kCols; ++cc) o[i][cc] = 0.f;
  }
  for (int k0 = 0; k0 < n; k0 += kFwdKeys) {
    const int k_valid = min(kFwdKeys, n - k0);
    __syncthreads();  // the last tile's ks, vs and ps are read
    load_rows<D>(q_base + dm + k0 * row_stride, row_stride, k_valid, kFwdKeys, ks);
    load_rows<D>(q_base + 2 * dm + k0 * row_stride, row_stride, k_valid, kFwdKeys, vs);
    __syncthreads();
    float s[4][2] = {};
#pragma unroll 4
    for (int d = 0; d < D; d += 4) {
      float4 kk[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) kk[j] = *reinterpret_cast<const float4*>(ks + (tx + 16 * j) * H::kStride + d);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float4 qq = *reinterpret_cast<const float4*>(qs + (ty + 16 * i) * H::kStride + d);
#pragma unroll
        for (int j = 0; j < 2; ++j) s[i][j] = dot4(qq, kk[j], s[i][j]);
      }
    }
    // Online softmax: every tile holds at least one key, so the new maximum is finite.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float sv[2], mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        sv[j] = tx + 16 * j < k_valid ? s[i][j] * scale : -INFINITY;
        mx = fmaxf(mx, sv[j]);
      }
      const float m_new = fmaxf(m[i], half_warp_max(mx));
      const float alpha = expf(m[i] - m_new);
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float p = expf(sv[j] - m_new);
        ps[(ty + 16 * i) * kP + tx + 16 * j] = p;
        sum += p;
      }
      l[i] = l[i] * alpha + half_warp_sum(sum);
      m[i] = m_new;
#pragma unroll
      for (int cc = 0; cc < H::kCols; ++cc) o[i][cc] *= alpha;
    }
    __syncthreads();
    // Past k_valid the probabilities are 0 and the values rows 0.
    for (int c = 0; c < k_valid; c += 4) {
      float4 p4[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) p4[i] = *reinterpret_cast<const float4*>(ps + (ty + 16 * i) * kP + c);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        float v[H::kCols];
        load_cols<D>(vs, c + u, tx, v);
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int cc = 0; cc < H::kCols; ++cc) o[i][cc] = fmaf(at(p4[i], u), v[cc], o[i][cc]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty + 16 * i;
    if (r >= q_valid) continue;
    const float inv = 1.f / l[i];
    float* dst = out + (b * n + q0 + r) * dm + h * D;
#pragma unroll
    for (int cc = 0; cc < H::kCols; ++cc) dst[H::col(cc, tx)] = o[i][cc] * inv;
    if (lse && tx == 0) lse[(b * heads + h) * n + q0 + r] = m[i] + logf(l[i]);
  }
}

// delta[b, h, q] = sum_d dout[b, q, h, d] * out[b, q, h, d]: one warp per (b, q, h).
__global__ void flash_delta_kernel(const float* __restrict__ out, const float* __restrict__ dout,
                                   float* __restrict__ delta, int64_t rows, int n, int heads, int hd) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;  // (b * n + q) * heads + h
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* o = out + row * hd;  // (B, N, H * hd) is (B * N * H, hd)
  const float* g = dout + row * hd;
  float acc = 0.f;
  for (int d = lane; d < hd; d += 32) acc = fmaf(o[d], g[d], acc);
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) {
    const int64_t h = row % heads, bq = row / heads, b = bq / n, q = bq % n;
    delta[(b * heads + h) * n + q] = acc;
  }
}

// One block per (64 keys, head, batch element), over every tile of 32 queries: recomputes the
// probabilities P from the log-sum-exp, dP = dO V^T and dS = P (dP - delta); keeps dV += P^T dO
// and dK += dS^T Q in registers and writes dQ's share dS K for each query tile to dq_part
// (its key tile's slice, (B, N, H * D) like the output).
template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_backward_kernel(const float* __restrict__ qkv, const float* __restrict__ dout, const float* __restrict__ lse,
                          const float* __restrict__ delta, float* __restrict__ dqkv, float* __restrict__ dq_part, int n,
                          int heads, float scale) {
  using H = Head<D>;
  constexpr int kQ = kBwdRows + 4;
  extern __shared__ __align__(16) float smem[];
  float* ks = smem;
  float* vs = ks + kBwdKeys * H::kStride;
  float* qs = vs + kBwdKeys * H::kStride;
  float* dos = qs + kBwdRows * H::kStride;
  float* pt = dos + kBwdRows * H::kStride;  // (kBwdKeys, kQ): P transposed
  float* dst = pt + kBwdKeys * kQ;           // (kBwdKeys, kQ): dS transposed
  float* lse_s = dst + kBwdKeys * kQ;
  float* delta_s = lse_s + kBwdRows;
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const int k0 = blockIdx.x * kBwdKeys;
  const int64_t h = blockIdx.y, b = blockIdx.z, dm = int64_t(heads) * D, row_stride = 3 * dm;
  const float* q_base = qkv + b * n * row_stride + h * D;
  const int k_valid = min(kBwdKeys, n - k0);
  load_rows<D>(q_base + dm + k0 * row_stride, row_stride, k_valid, kBwdKeys, ks);
  load_rows<D>(q_base + 2 * dm + k0 * row_stride, row_stride, k_valid, kBwdKeys, vs);
  float* part = dq_part + int64_t(blockIdx.x) * gridDim.z * n * dm;  // this key tile's slice

  float dk[4][H::kCols] = {}, dv[4][H::kCols] = {};
  for (int q0 = 0; q0 < n; q0 += kBwdRows) {
    const int q_valid = min(kBwdRows, n - q0);
    __syncthreads();  // the last query tile's reads are done
    load_rows<D>(q_base + q0 * row_stride, row_stride, q_valid, kBwdRows, qs);
    load_rows<D>(dout + (b * n + q0) * dm + h * D, dm, q_valid, kBwdRows, dos);
    if (tid < kBwdRows) {
      // A query past n gets probability 0 (exp(-inf)) and delta 0, so it adds nothing.
      lse_s[tid] = tid < q_valid ? lse[(b * heads + h) * n + q0 + tid] : INFINITY;
      delta_s[tid] = tid < q_valid ? delta[(b * heads + h) * n + q0 + tid] : 0.f;
    }
    __syncthreads();
    float s[4][2] = {}, dp[4][2] = {};
#pragma unroll 2
    for (int d = 0; d < D; d += 4) {
      float4 qq[2], gg[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        qq[j] = *reinterpret_cast<const float4*>(qs + (tx + 16 * j) * H::kStride + d);
        gg[j] = *reinterpret_cast<const float4*>(dos + (tx + 16 * j) * H::kStride + d);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float4 kk = *reinterpret_cast<const float4*>(ks + (ty + 16 * i) * H::kStride + d);
        const float4 vv = *reinterpret_cast<const float4*>(vs + (ty + 16 * i) * H::kStride + d);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          s[i][j] = dot4(kk, qq[j], s[i][j]);
          dp[i][j] = dot4(vv, gg[j], dp[i][j]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int kr = ty + 16 * i;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int qc = tx + 16 * j;
        const float p = kr < k_valid ? expf(s[i][j] * scale - lse_s[qc]) : 0.f;
        pt[kr * kQ + qc] = p;
        dst[kr * kQ + qc] = p * (dp[i][j] - delta_s[qc]);
      }
    }
    __syncthreads();
    for (int q = 0; q < q_valid; q += 4) {
      float4 p4[4], s4[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        p4[i] = *reinterpret_cast<const float4*>(pt + (ty + 16 * i) * kQ + q);
        s4[i] = *reinterpret_cast<const float4*>(dst + (ty + 16 * i) * kQ + q);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        float g[H::kCols], x[H::kCols];
        load_cols<D>(dos, q + u, tx, g);
        load_cols<D>(qs, q + u, tx, x);
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int cc = 0; cc < H::kCols; ++cc) {
            dv[i][cc] = fmaf(at(p4[i], u), g[cc], dv[i][cc]);
            dk[i][cc] = fmaf(at(s4[i], u), x[cc], dk[i][cc]);
          }
      }
    }
    // This key tile's share of dQ for queries ty + 16 i (unscaled; the sum applies the scale).
    float dq[2][H::kCols] = {};
    for (int k = 0; k < k_valid; ++k) {
      float kv[H::kCols];
      load_cols<D>(ks, k, tx, kv);
      const float a0 = dst[k * kQ + ty], a1 = dst[k * kQ + ty + 16];
#pragma unroll
      for (int cc = 0; cc < H::kCols; ++cc) {
        dq[0][cc] = fmaf(a0, kv[cc], dq[0][cc]);
        dq[1][cc] = fmaf(a1, kv[cc], dq[1][cc]);
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = ty + 16 * i;
      if (r >= q_valid) continue;
      float* row = part + (b * n + q0 + r) * dm + h * D;
#pragma unroll
      for (int cc = 0; cc < H::kCols; ++cc) row[H::col(cc, tx)] = dq[i][cc];
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int kr = ty + 16 * i;
    if (kr >= k_valid) continue;
    float* row = dqkv + (b * n + k0 + kr) * row_stride + h * D;
#pragma unroll
    for (int cc = 0; cc < H::kCols; ++cc) {
      row[dm + H::col(cc, tx)] = dk[i][cc] * scale;
      row[2 * dm + H::col(cc, tx)] = dv[i][cc];
    }
  }
}

// dQ = scale * the key tiles' shares summed in tile order, into dqkv's q columns.
__global__ void flash_dq_sum_kernel(const float* __restrict__ dq_part, float* __restrict__ dqkv, int64_t elems,
                                    int64_t dm, int tiles, float scale) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < elems; e += int64_t(gridDim.x) * blockDim.x) {
    float acc = 0.f;
    for (int t = 0; t < tiles; ++t) acc += dq_part[t * elems + e];
    dqkv[(e / dm) * 3 * dm + e % dm] = acc * scale;
  }
}

bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

template <typename F>
void with_head_dim(int64_t hd, F&& f) {
  switch (hd) {
    case 64: f(std::integral_constant<int, 64>{}); break;
    case 80: f(std::integral_constant<int, 80>{}); break;
    case 128: f(std::integral_constant<int, 128>{}); break;
    default: VITDDP_ASSERT(false, "flash attention f32: head dim ", hd, " is not 64, 80 or 128");
  }
}

template <typename Kernel>
void allow_shared(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace

bool flash_f32_fits(const Tensor& qkv, int64_t num_heads) {
  if (qkv.dtype() != DType::kF32 || !qkv.device().is_cuda() || qkv.dim() != 3 || num_heads <= 0) return false;
  if (qkv.size(2) % (3 * num_heads) != 0 || qkv.size(1) < 1) return false;
  // The grid is (query or key tiles, heads, batch): CUDA's limit of 65535 on its y and z.
  if (qkv.size(0) < 1 || qkv.size(0) > 65535 || num_heads > 65535) return false;
  const int64_t hd = qkv.size(2) / 3 / num_heads;
  return hd == 64 || hd == 80 || hd == 128;
}

void flash_f32_forward(const Tensor& qkv, int64_t num_heads, const Tensor& out, const Tensor& lse) {
  VITDDP_ASSERT(flash_f32_fits(qkv, num_heads) && qkv.is_contiguous() && out.is_contiguous() && aligned16(qkv),
                "flash attention f32: qkv ", qkv.description());
  const int64_t b = qkv.size(0), n = qkv.size(1), hd = qkv.size(2) / 3 / num_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  with_head_dim(hd, [&](auto d) {
    constexpr int D = decltype(d)::value;
    const size_t bytes = sizeof(float) * ((kFwdRows + 2 * kFwdKeys) * Head<D>::kStride + kFwdRows * (kFwdKeys + 4));
    allow_shared(flash_forward_kernel<D>, bytes);
    const dim3 grid(static_cast<unsigned>((n + kFwdRows - 1) / kFwdRows), static_cast<unsigned>(num_heads),
                    static_cast<unsigned>(b));
    flash_forward_kernel<D><<<grid, kThreads, bytes, current_stream()>>>(
        qkv.data<float>(), out.data<float>(), lse.defined() ? lse.data<float>() : nullptr, static_cast<int>(n),
        static_cast<int>(num_heads), scale);
    CUDA_CHECK_LAUNCH();
  });
}

void flash_f32_backward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout,
                        int64_t num_heads, const Tensor& dqkv) {
  VITDDP_ASSERT(flash_f32_fits(qkv, num_heads) && qkv.is_contiguous() && aligned16(qkv) && aligned16(dout) &&
                    dout.is_contiguous() && out.is_contiguous() && dqkv.is_contiguous() &&
                    dout.dtype() == DType::kF32 && out.dtype() == DType::kF32 && lse.dtype() == DType::kF32 &&
                    dout.numel() == qkv.numel() / 3 && lse.numel() == qkv.size(0) * num_heads * qkv.size(1),
                "flash attention f32 backward: qkv ", qkv.description(), ", dout ", dout.description());
  const int64_t b = qkv.size(0), n = qkv.size(1), dm = qkv.size(2) / 3, hd = dm / num_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t tiles = (n + kBwdKeys - 1) / kBwdKeys, rows = b * n * num_heads;
  Tensor delta = Tensor::empty({b, num_heads, n}, DType::kF32, qkv.device());
  Tensor dq_part = Tensor::empty({tiles, b, n, dm}, DType::kF32, qkv.device());
  flash_delta_kernel<<<static_cast<unsigned>((rows * 32 + 255) / 256), 256, 0, current_stream()>>>(
      out.data<float>(), dout.data<float>(), delta.data<float>(), rows, static_cast<int>(n),
      static_cast<int>(num_heads), static_cast<int>(hd));
  CUDA_CHECK_LAUNCH();
  with_head_dim(hd, [&](auto d) {
    constexpr int D = decltype(d)::value;
    const size_t bytes = sizeof(float) * ((2 * kBwdKeys + 2 * kBwdRows) * Head<D>::kStride +
                                          2 * kBwdKeys * (kBwdRows + 4) + 2 * kBwdRows);
    allow_shared(flash_backward_kernel<D>, bytes);
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(num_heads), static_cast<unsigned>(b));
    flash_backward_kernel<D><<<grid, kThreads, bytes, current_stream()>>>(
        qkv.data<float>(), dout.data<float>(), lse.data<float>(), delta.data<float>(), dqkv.data<float>(),
        dq_part.data<float>(), static_cast<int>(n), static_cast<int>(num_heads), scale);
    CUDA_CHECK_LAUNCH();
  });
  const int64_t elems = b * n * dm;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((elems + 255) / 256, 4096));
  flash_dq_sum_kernel<<<blocks, 256, 0, current_stream()>>>(dq_part.data<float>(), dqkv.data<float>(), elems, dm,
                                                           static_cast<int>(tiles), scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp::cuda
