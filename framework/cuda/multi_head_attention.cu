#include <cstdint>
#include <initializer_list>

#include "framework/cuda/check.h"
#include "framework/cuda/context.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/multi_head_attention.h"
#include "framework/cuda/multi_head_attention_tc.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {

constexpr int kBlock = 256;
constexpr size_t kMaxSharedBytes = 160 * 1024;

// Shared-memory tiles are padded by one column so row-wise and column-wise walks avoid bank
// conflicts. Layout: kTiles tiles of (N, hd + 1), then kProbTiles tiles of (N, N + 1).
size_t shared_bytes(int64_t n, int64_t hd, int tiles, int prob_tiles) {
  return sizeof(float) * (tiles * n * (hd + 1) + prob_tiles * n * (n + 1));
}

template <typename T>
__device__ void load_head(const T* qkv, int64_t b, int64_t h, int64_t n, int64_t hd, int64_t dim, int which,
                          float* tile) {
  for (int64_t idx = threadIdx.x; idx < n * hd; idx += blockDim.x) {
    int64_t i = idx / hd, d = idx % hd;
    tile[i * (hd + 1) + d] = to_f(qkv[(b * n + i) * 3 * dim + which * dim + h * hd + d]);
  }
}

// Register tiling: each thread computes kStrip outputs that share one operand, so shared-memory
// loads per multiply-add drop from 2 to (1 + kStrip) / kStrip. Strip members are `stride` apart
// (not adjacent) so the threads of a warp read consecutive, conflict-free rows.
constexpr int kStrip = 4;

// out[i][j] = scale * sum_d a[i][d] b[j][d] for i, j < n; a, b are (n, hd + 1) tiles, out is
// (n, n + 1).
__device__ void row_dot_products(const float* a, const float* b, float* out, int64_t n, int64_t hd, float scale) {
  const int64_t stride = (n + kStrip - 1) / kStrip;
  for (int64_t idx = threadIdx.x; idx < n * stride; idx += blockDim.x) {
    const int64_t i = idx / stride, j0 = idx % stride;
    float acc[kStrip] = {};
    for (int64_t d = 0; d < hd; ++d) {
      const float av = a[i * (hd + 1) + d];
#pragma unroll
      for (int c = 0; c < kStrip; ++c) {
        const int64_t j = j0 + c * stride;
        if (j < n) acc[c] += av * b[j * (hd + 1) + d];
      }
    }
#pragma unroll
    for (int c = 0; c < kStrip; ++c) {
      const int64_t j = j0 + c * stride;
      if (j < n) out[i * (n + 1) + j] = acc[c] * scale;
    }
  }
}

// For d < hd and rows r < n: result[r][d] = sum_j m(r, j) t[j][d], with m read from an
// (n, n + 1) tile either as m[r][j] (transposed = false) or m[j][r] (transposed = true).
// Calls store(r, d, value) for each result.
template <bool kTransposed, typename Store>
__device__ void tile_products(const float* m, const float* t, int64_t n, int64_t hd, Store&& store) {
  const int64_t stride = (n + kStrip - 1) / kStrip;
  for (int64_t idx = threadIdx.x; idx < stride * hd; idx += blockDim.x) {
    const int64_t r0 = idx / hd, d = idx % hd;
    float acc[kStrip] = {};
    for (int64_t j = 0; j < n; ++j) {
      const float tv = t[j * (hd + 1) + d];
#pragma unroll
      for (int c = 0; c < kStrip; ++c) {
        const int64_t r = r0 + c * stride;
        if (r < n) acc[c] += (kTransposed ? m[j * (n + 1) + r] : m[r * (n + 1) + j]) * tv;
      }
    }
#pragma unroll
    for (int c = 0; c < kStrip; ++c) {
      const int64_t r = r0 + c * stride;
      if (r < n) store(r, d, acc[c]);
    }
  }
}

// p = softmax(scale * q k^T), row by row, one warp per row.
__device__ void attention_probs(const float* q, const float* k, float* p, int64_t n, int64_t hd, float scale) {
  row_dot_products(q, k, p, n, hd, scale);
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int64_t i = warp; i < n; i += warps) {
    float* row = p + i * (n + 1);
    float m = -INFINITY;
    for (int64_t j = lane; j < n; j += 32) m = fmaxf(m, row[j]);
    m = warp_max(m);
    float sum = 0.0f;
    for (int64_t j = lane; j < n; j += 32) {
      float e = expf(row[j] - m);
      row[j] = e;
      sum += e;
    }
    float inv = 1.0f / warp_sum(sum);
    for (int64_t j = lane; j < n; j += 32) row[j] *= inv;
  }
  __syncthreads();
}

template <typename T>
__global__ void mha_forward_kernel(const T* qkv, T* out, int64_t n, int64_t heads, int64_t hd, float scale) {
  extern __shared__ float smem[];
  const int64_t b = blockIdx.x / heads, h = blockIdx.x % heads, dim = heads * hd;
  float* q = smem;
  float* k = q + n * (hd + 1);
  float* v = k + n * (hd + 1);
  float* p = v + n * (hd + 1);  // (N, N + 1)
  load_head(qkv, b, h, n, hd, dim, 0, q);
  load_head(qkv, b, h, n, hd, dim, 1, k);
  load_head(qkv, b, h, n, hd, dim, 2, v);
  __syncthreads();
  attention_probs(q, k, p, n, hd, scale);
  tile_products<false>(p, v, n, hd, [&](int64_t i, int64_t d, float o) {  // O = P V
    out[(b * n + i) * dim + h * hd + d] = from_f<T>(o);
  });
}

template <typename T>
__global__ void mha_backward_kernel(const T* qkv, const T* dout, T* dqkv, int64_t n, int64_t heads, int64_t hd,
                                    float scale) {
  extern __shared__ float smem[];
  const int64_t b = blockIdx.x / heads, h = blockIdx.x % heads, dim = heads * hd;
  const int64_t tile = n * (hd + 1);
  float* q = smem;
  float* k = q + tile;
  float* v = k + tile;
  float* dO = v + tile;
  float* p = dO + tile;         // (N, N + 1) probabilities
  float* ds = p + n * (n + 1);  // (N, N + 1) dP, then dS
  load_head(qkv, b, h, n, hd, dim, 0, q);
  load_head(qkv, b, h, n, hd, dim, 1, k);
  load_head(qkv, b, h, n, hd, dim, 2, v);
  for (int64_t idx = threadIdx.x; idx < n * hd; idx += blockDim.x) {
    int64_t i = idx / hd, d = idx % hd;
    dO[i * (hd + 1) + d] = to_f(dout[(b * n + i) * dim + h * hd + d]);
  }
  __syncthreads();
  attention_probs(q, k, p, n, hd, scale);
  T* dq_out = dqkv;
  // dV (N, hd) = P^T dO; dP (N, N) = dO V^T.
  tile_products<true>(p, dO, n, hd, [&](int64_t j, int64_t d, float acc) {  // dV = P^T dO
    dq_out[(b * n + j) * 3 * dim + 2 * dim + h * hd + d] = from_f<T>(acc);
  });
  row_dot_products(dO, v, ds, n, hd, 1.0f);  // dP = dO V^T
  __syncthreads();
  // dS = scale * P * (dP - rowsum(dP * P)), one warp per row.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int64_t i = warp; i < n; i += warps) {
    float r = 0.0f;
    for (int64_t j = lane; j < n; j += 32) r += ds[i * (n + 1) + j] * p[i * (n + 1) + j];
    r = warp_sum(r);
    for (int64_t j = lane; j < n; j += 32) ds[i * (n + 1) + j] = scale * p[i * (n + 1) + j] * (ds[i * (n + 1) + j] - r);
  }
  __syncthreads();
  // dQ (N, hd) = dS K; dK (N, hd) = dS^T Q.
  tile_products<false>(ds, k, n, hd, [&](int64_t i, int64_t d, float acc) {  // dQ = dS K
    dq_out[(b * n + i) * 3 * dim + h * hd + d] = from_f<T>(acc);
  });
  tile_products<true>(ds, q, n, hd, [&](int64_t i, int64_t d, float acc) {  // dK = dS^T Q
    dq_out[(b * n + i) * 3 * dim + dim + h * hd + d] = from_f<T>(acc);
  });
}

template <typename Kernel>
void allow_shared(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// Note [Tensor-core attention]
// The SIMT kernels above compute in fp32 out of shared memory and were a large part of a
// ViT-L/32 step (docs/performance.md, "What was tried, in order"). bf16 and f16 heads of
// exactly 64 dims over at most 64 tokens therefore run the mma.sync kernels of
// multi_head_attention_tc.cu, which pad each head to one 64 x 64 tile and move it with 16-byte
// vectors (hence the alignment check). f32 runs the TF32 (m16n8k8) kernels: one TF32 product
// per product under MatmulPrecision::kTf32, the mode in which its linear layers already take
// TF32 products (inputs rounded to 10-bit mantissas, PyTorch's allow_tf32), and three under
// strict kFp32 (3xTF32: each operand split into two TF32 parts, about 22 significand bits, the
// fp32 torchvision parity test's tolerance kept). Other head sizes and longer sequences keep
// the SIMT kernels. This is the only place that chooses.
bool use_tensor_cores(MhaKernel kernel, const Tensor& qkv, int64_t num_heads,
                      std::initializer_list<const Tensor*> tensors) {
  if (kernel == MhaKernel::kSimt) return false;
  const int64_t n = qkv.size(1), hd = qkv.size(2) / 3 / num_heads;
  bool fits = tc_attention_fits(qkv.dtype(), n, hd);
  for (const Tensor* t : tensors) fits = fits && reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 == 0;
  VITDDP_CHECK(fits || kernel == MhaKernel::kAuto,
               "multi_head_attention: the tensor-core kernels take bf16/f16/f32 "
               "with head_dim 64, seq_len <= 64 and 16-byte aligned tensors; got qkv ",
               qkv.description(), " with ", num_heads, " heads");
  return fits;
}

}  // namespace

bool fused_attention_fits(int64_t seq_len, int64_t head_dim) {
  return seq_len > 0 && head_dim > 0 && shared_bytes(seq_len, head_dim, 4, 2) <= kMaxSharedBytes;
}

bool tensor_core_attention_fits(DType dtype, int64_t seq_len, int64_t head_dim) {
  return tc_attention_fits(dtype, seq_len, head_dim);
}

void mha_forward(const Tensor& qkv, int64_t num_heads, const Tensor& out, MhaKernel kernel) {
  if (use_tensor_cores(kernel, qkv, num_heads, {&qkv, &out})) {
    mha_forward_tc(qkv, num_heads, out);
    return;
  }
  const int64_t b = qkv.size(0), n = qkv.size(1), hd = qkv.size(2) / 3 / num_heads;
  const size_t bytes = shared_bytes(n, hd, 3, 1);
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  dispatch_floating(qkv.dtype(), "multi_head_attention", [&](auto zero) {
    using T = decltype(zero);
    allow_shared(mha_forward_kernel<T>, bytes);
    mha_forward_kernel<T><<<static_cast<unsigned>(b * num_heads), kBlock, bytes, current_stream()>>>(
        qkv.data<T>(), out.data<T>(), n, num_heads, hd, scale);
    CUDA_CHECK_LAUNCH();
  });
}

void mha_backward(const Tensor& qkv, const Tensor& dout, int64_t num_heads, const Tensor& dqkv,
                  MhaKernel kernel) {
  if (use_tensor_cores(kernel, qkv, num_heads, {&qkv, &dout, &dqkv})) {
    mha_backward_tc(qkv, dout, num_heads, dqkv);
    return;
  }
  const int64_t b = qkv.size(0), n = qkv.size(1), hd = qkv.size(2) / 3 / num_heads;
  const size_t bytes = shared_bytes(n, hd, 4, 2);
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  dispatch_floating(qkv.dtype(), "multi_head_attention backward", [&](auto zero) {
    using T = decltype(zero);
    allow_shared(mha_backward_kernel<T>, bytes);
    mha_backward_kernel<T><<<static_cast<unsigned>(b * num_heads), kBlock, bytes, current_stream()>>>(
        qkv.data<T>(), dout.data<T>(), dqkv.data<T>(), n, num_heads, hd, scale);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace vitddp::cuda
