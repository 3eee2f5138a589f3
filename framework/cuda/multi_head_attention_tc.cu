// Tensor-core kernels for fused multi-head attention on packed qkv (B, N, 3D), bf16/f16, head
// dim 64, N <= 64. One block of four warps per (batch, head): the head's q, k, v (and dO) are
// copied with 16-byte loads into 64 x 64 shared tiles, rows >= N zero-filled; warp w owns rows
// [16w, 16w + 16). Products are mma.sync m16n8k16 with fp32 accumulators, fed by ldmatrix;
// softmax is fp32 in registers with keys >= N masked to probability 0, and P (and dS) are
// rounded to the input type only where they feed a product. Rows >= N are never written.
// Backward recomputes P from q and k, as the SIMT kernels do. f32 tensors have their own pair
// of kernels, m16n8k8 TF32 (three products each, 3xTF32, in strict fp32), in the section
// "f32 inputs, TF32 products".
//
// Fragment layouts (PTX ISA, "mma.m16n8k16"): with g = lane / 4 and c = lane % 4, an f32
// accumulator of one 16 x 8 tile holds (g, 2c), (g, 2c + 1), (g + 8, 2c), (g + 8, 2c + 1);
// a 16 x 16 A fragment holds rows g, g + 8 and columns 2c, 2c + 1, 2c + 8, 2c + 9 in four
// registers, so the accumulators of two adjacent 16 x 8 tiles are, repacked, an A fragment
// (P feeds P V without going through shared memory).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "framework/cuda/check.h"
#include "framework/cuda/context.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/multi_head_attention_tc.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {

constexpr int kTile = 64;                   // rows (tokens, padded) and columns (head dims)
constexpr int kStride = kTile + 8;          // elements per shared row: 144 bytes, so the 8 rows
                                            // an ldmatrix phase reads start in distinct banks
constexpr int kTileElems = kTile * kStride;
constexpr int kVec = 8;                     // elements per 16-byte vector
constexpr int kWarps = kTile / 16;          // 16 rows per warp
constexpr int kTcBlock = 32 * kWarps;
constexpr int kForwardTiles = 3;            // q, k, v
constexpr int kBackwardTiles = 6;           // q, k, v, dO, P, dS
constexpr float kLog2e = 1.4426950408889634f;

static_assert(kTile == kTcHeadDim && kTile == kTcMaxSeqLen, "one tile per head");

using Acc = float[8][4];  // a warp's 16 x 64 fp32 result: eight 16 x 8 accumulator tiles

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p))
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p))
               : "memory");
}

// c (16 x 8, f32) += a (16 x 16) b (16 x 8).
template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(std::is_same_v<T, __half>, "bf16 or f16");
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats rounded to T, `lo` in the low half (the lower column).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t u;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    memcpy(&u, &v, sizeof(u));
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    memcpy(&u, &v, sizeof(u));
  }
  return u;
}

// ---------------------------------------------------------------- fragments from shared tiles
// Tiles are row-major (kTile, kStride) arrays of T. `l` is the lane; ldmatrix .x4 takes the
// row addresses of matrix i from lanes [8i, 8i + 8) and returns matrix i in register i.

// A (16 x 16) = tile[r0 .. r0 + 16)[c0 .. c0 + 16).
template <typename T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* tile, int r0, int c0) {
  const int l = threadIdx.x % 32;
  ldmatrix_x4(a, tile + (r0 + l % 16) * kStride + c0 + (l / 16) * 8);
}

// A (16 x 16) with A[m][k] = tile[k0 + k][m0 + m] (the transpose of a stored block).
template <typename T>
__device__ __forceinline__ void load_a_trans(uint32_t (&a)[4], const T* tile, int k0, int m0) {
  const int l = threadIdx.x % 32, i = l / 8;
  ldmatrix_x4_trans(a, tile + (k0 + (i / 2) * 8 + l % 8) * kStride + m0 + (i % 2) * 8);
}

// B of two adjacent n-tiles, B[k][n] = tile[n0 + n][k0 + k] (the tile holds B^T, as K does for
// Q K^T): b[0], b[1] for columns [n0, n0 + 8), b[2], b[3] for [n0 + 8, n0 + 16).
template <typename T>
__device__ __forceinline__ void load_b(uint32_t (&b)[4], const T* tile, int n0, int k0) {
  const int l = threadIdx.x % 32, i = l / 8;
  ldmatrix_x4(b, tile + (n0 + (i / 2) * 8 + l % 8) * kStride + k0 + (i % 2) * 8);
}

// B of two adjacent n-tiles, B[k][n] = tile[k0 + k][n0 + n] (the tile holds B, as V does for
// P V); registers as in load_b.
template <typename T>
__device__ __forceinline__ void load_b_trans(uint32_t (&b)[4], const T* tile, int k0, int n0) {
  const int l = threadIdx.x % 32, i = l / 8;
  ldmatrix_x4_trans(b, tile + (k0 + (i % 2) * 8 + l % 8) * kStride + n0 + (i / 2) * 8);
}

// The A fragment of columns [16 kc, 16 kc + 16) of a warp's accumulators, rounded to T.
template <typename T>
__device__ __forceinline__ void a_from_acc(uint32_t (&a)[4], const Acc& acc, int kc) {
  a[0] = pack2<T>(acc[2 * kc][0], acc[2 * kc][1]);
  a[1] = pack2<T>(acc[2 * kc][2], acc[2 * kc][3]);
  a[2] = pack2<T>(acc[2 * kc + 1][0], acc[2 * kc + 1][1]);
  a[3] = pack2<T>(acc[2 * kc + 1][2], acc[2 * kc + 1][3]);
}

__device__ __forceinline__ void zero(Acc& acc) {
#pragma unroll
  for (int t = 0; t < 8; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[t][e] = 0.0f;
}

// acc (16 x 64) += A (16 x 64) B (64 x 64), skipping the 16-wide chunks of k at or beyond
// k_limit and of n at or beyond n_limit (all-padding rows or columns). load_a(a, kc) gives the
// A fragment of k chunk kc; load_b(b, kc, np) the B fragments of k chunk kc, n-tiles 2np, 2np + 1.
template <typename T, typename LoadA, typename LoadB>
__device__ __forceinline__ void warp_product(Acc& acc, int k_limit, int n_limit, LoadA&& load_a_chunk,
                                             LoadB&& load_b_pair) {
#pragma unroll
  for (int kc = 0; kc < kTile / 16; ++kc) {
    if (16 * kc < k_limit) {
      uint32_t a[4];
      load_a_chunk(a, kc);
#pragma unroll
      for (int np = 0; np < kTile / 16; ++np) {
        if (16 * np < n_limit) {
          uint32_t b[4];
          load_b_pair(b, kc, np);
          mma<T>(acc[2 * np], a, b[0], b[1]);
          mma<T>(acc[2 * np + 1], a, b[2], b[3]);
        }
      }
    }
  }
}

// Writes a warp's accumulators, rounded to T, to rows [row0, row0 + 16) of a tile.
template <typename T>
__device__ __forceinline__ void store_acc(const Acc& acc, T* tile, int row0) {
  const int l = threadIdx.x % 32, g = l / 4, c = l % 4;
#pragma unroll
  for (int t = 0; t < 8; ++t) {
    T* p = tile + (row0 + g) * kStride + 8 * t + 2 * c;
    *reinterpret_cast<uint32_t*>(p) = pack2<T>(acc[t][0], acc[t][1]);
    *reinterpret_cast<uint32_t*>(p + 8 * kStride) = pack2<T>(acc[t][2], acc[t][3]);
  }
}

// ---------------------------------------------------------------- global <-> shared

// Copies rows [0, n) of kCount 64-column slices of a row-major matrix (row stride `ld`; slice s
// starts at column s * slice_stride) into consecutive tiles; rows [n, 64) become zeros, so
// padded keys and values contribute nothing and never hold NaN. The whole block calls it.
template <int kCount, typename T>
__device__ __forceinline__ void load_tiles(const T* __restrict__ src, int64_t ld, int64_t slice_stride, int n,
                                           T* tiles) {
  constexpr int kVecsPerTile = kTile * kTile / kVec;
  static_assert(kCount * kVecsPerTile % kTcBlock == 0, "whole rounds");
#pragma unroll
  for (int it = 0; it < kCount * kVecsPerTile / kTcBlock; ++it) {
    const int idx = threadIdx.x + it * kTcBlock;
    const int s = idx / kVecsPerTile, r = (idx / (kTile / kVec)) % kTile, c = (idx % (kTile / kVec)) * kVec;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (r < n) v = *reinterpret_cast<const uint4*>(src + r * ld + s * slice_stride + c);
    *reinterpret_cast<uint4*>(tiles + s * kTileElems + r * kStride + c) = v;
  }
}

// Copies the valid rows of [row0, row0 + 16) of a tile to dst (row stride ld); one warp.
template <typename T>
__device__ __forceinline__ void store_rows(const T* tile, int row0, int n, T* __restrict__ dst, int64_t ld) {
  const int l = threadIdx.x % 32;
#pragma unroll
  for (int it = 0; it < 16 * (kTile / kVec) / 32; ++it) {
    const int idx = l + 32 * it;
    const int r = row0 + idx / (kTile / kVec), c = (idx % (kTile / kVec)) * kVec;
    if (r < n) *reinterpret_cast<uint4*>(dst + r * ld + c) = *reinterpret_cast<const uint4*>(tile + r * kStride + c);
  }
}

// ---------------------------------------------------------------- kernels

// In place, a warp's scores (accumulator layout) become softmax(scale * scores) row by row,
// fp32; keys >= n get 0. scale_log2 = scale * log2(e).
__device__ __forceinline__ void softmax_rows(Acc& p, int n, float scale_log2) {
  const int c = threadIdx.x % 4;
  float row_max[2] = {-INFINITY, -INFINITY};  // rows g and g + 8
#pragma unroll
  for (int t = 0; t < 8; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (8 * t + 2 * c + (e & 1) >= n) p[t][e] = -INFINITY;
      row_max[e / 2] = fmaxf(row_max[e / 2], p[t][e]);
    }
  float sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int r = 0; r < 2; ++r) {  // a row lives in the four lanes of one quad
    row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 1));
    row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 2));
  }
#pragma unroll
  for (int t = 0; t < 8; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      p[t][e] = exp2f((p[t][e] - row_max[e / 2]) * scale_log2);  // masked: exp2(-inf) = 0
      sum[e / 2] += p[t][e];
    }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
    sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
    sum[r] = 1.0f / sum[r];
  }
#pragma unroll
  for (int t = 0; t < 8; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) p[t][e] *= sum[e / 2];
}

// p = softmax(scale * q k^T) for the warp's rows [row0, row0 + 16), fp32; keys >= n get 0.
// scale_log2 = scale * log2(e).
template <typename T>
__device__ __forceinline__ void attention_probs(const T* q, const T* k, int n, int row0, float scale_log2, Acc& p) {
  zero(p);
  warp_product<T>(
      p, kTile, n, [&](uint32_t(&a)[4], int kc) { load_a(a, q, row0, 16 * kc); },
      [&](uint32_t(&b)[4], int kc, int np) { load_b(b, k, 16 * np, 16 * kc); });
  softmax_rows(p, n, scale_log2);
}

// O = softmax(scale q k^T) v; grid B * H, kTcBlock threads.
template <typename T>
__global__ void __launch_bounds__(kTcBlock) mha_forward_tc_kernel(const T* __restrict__ qkv, T* __restrict__ out,
                                                                   int n, int heads, float scale_log2) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* q = reinterpret_cast<T*>(smem);  // (64, kStride) each: q, k, v
  T* k = q + kTileElems;
  T* v = k + kTileElems;
  const int64_t b = blockIdx.x / heads, h = blockIdx.x % heads, dim = static_cast<int64_t>(heads) * kTile;
  load_tiles<kForwardTiles>(qkv + b * n * 3 * dim + h * kTile, 3 * dim, dim, n, q);
  __syncthreads();
  const int row0 = 16 * (threadIdx.x / 32);
  if (row0 >= n) return;  // only padding rows; no block barrier follows
  Acc p, o;
  attention_probs(q, k, n, row0, scale_log2, p);
  zero(o);
  warp_product<T>(
      o, n, kTile, [&](uint32_t(&a)[4], int kc) { a_from_acc<T>(a, p, kc); },
      [&](uint32_t(&bf)[4], int kc, int np) { load_b_trans(bf, v, 16 * kc, 16 * np); });
  // Stage O in this warp's own q rows (no other warp reads them) for 16-byte stores.
  __syncwarp();
  store_acc(o, q, row0);
  __syncwarp();
  store_rows(q, row0, n, out + b * n * dim + h * kTile, dim);
}

// dqkv from qkv and dO; grid B * H, kTcBlock threads. Per warp, query rows [row0, row0 + 16):
// P, dP = dO V^T, D = rowsum(P * dP), dS = P (dP - D) scale, dQ = dS K; then, once all P and dS
// are in shared memory, key rows [row0, row0 + 16): dV = P^T dO, dK = dS^T Q.
template <typename T>
__global__ void __launch_bounds__(kTcBlock) mha_backward_tc_kernel(const T* __restrict__ qkv,
                                                                    const T* __restrict__ dout,
                                                                    T* __restrict__ dqkv, int n, int heads,
                                                                    float scale, float scale_log2) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* q = reinterpret_cast<T*>(smem);  // (64, kStride) each: q, k, v, dO, P, dS
  T* k = q + kTileElems;
  T* v = k + kTileElems;
  T* dO = v + kTileElems;
  T* p_tile = dO + kTileElems;
  T* ds_tile = p_tile + kTileElems;
  const int64_t b = blockIdx.x / heads, h = blockIdx.x % heads, dim = static_cast<int64_t>(heads) * kTile;
  load_tiles<3>(qkv + b * n * 3 * dim + h * kTile, 3 * dim, dim, n, q);
  load_tiles<1>(dout + b * n * dim + h * kTile, dim, 0, n, dO);
  __syncthreads();

  const int l = threadIdx.x % 32, g = l / 4, row0 = 16 * (threadIdx.x / 32);
  const bool active = row0 < n;  // warps of only padding rows skip the work, not the barriers
  Acc ds, dq, dv, dk;
  if (active) {
    Acc p;
    attention_probs(q, k, n, row0, scale_log2, p);
    // Padded query rows get P = 0 (their dO is 0 too), so they add nothing to dV and dK.
#pragma unroll
    for (int t = 0; t < 8; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (row0 + g + 8 * (e / 2) >= n) p[t][e] = 0.0f;
    zero(ds);
    warp_product<T>(
        ds, kTile, n, [&](uint32_t(&a)[4], int kc) { load_a(a, dO, row0, 16 * kc); },
        [&](uint32_t(&bf)[4], int kc, int np) { load_b(bf, v, 16 * np, 16 * kc); });  // dP = dO V^T
    float d[2] = {0.0f, 0.0f};  // D for rows g and g + 8: sum_j P_ij dP_ij = dO_i . O_i
#pragma unroll
    for (int t = 0; t < 8; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) d[e / 2] += p[t][e] * ds[t][e];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      d[r] += __shfl_xor_sync(0xffffffffu, d[r], 1);
      d[r] += __shfl_xor_sync(0xffffffffu, d[r], 2);
    }
#pragma unroll
    for (int t = 0; t < 8; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[t][e] = p[t][e] * (ds[t][e] - d[e / 2]) * scale;
    store_acc(p, p_tile, row0);
    store_acc(ds, ds_tile, row0);
  }
  __syncthreads();  // P and dS complete; V is read no more
  if (active) {
    zero(dq);
    warp_product<T>(
        dq, n, kTile, [&](uint32_t(&a)[4], int kc) { a_from_acc<T>(a, ds, kc); },
        [&](uint32_t(&bf)[4], int kc, int np) { load_b_trans(bf, k, 16 * kc, 16 * np); });  // dQ = dS K
    store_acc(dq, v, row0);  // staged in V's tile
    zero(dv);
    warp_product<T>(
        dv, n, kTile, [&](uint32_t(&a)[4], int kc) { load_a_trans(a, p_tile, 16 * kc, row0); },
        [&](uint32_t(&bf)[4], int kc, int np) { load_b_trans(bf, dO, 16 * kc, 16 * np); });  // dV = P^T dO
    zero(dk);
    warp_product<T>(
        dk, n, kTile, [&](uint32_t(&a)[4], int kc) { load_a_trans(a, ds_tile, 16 * kc, row0); },
        [&](uint32_t(&bf)[4], int kc, int np) { load_b_trans(bf, q, 16 * kc, 16 * np); });  // dK = dS^T Q
  }
  __syncthreads();  // Q and dO are read no more
  if (active) {
    store_acc(dk, q, row0);
    store_acc(dv, dO, row0);
    __syncwarp();
    T* base = dqkv + b * n * 3 * dim + h * kTile;
    store_rows(v, row0, n, base, 3 * dim);
    store_rows(q, row0, n, base + dim, 3 * dim);
    store_rows(dO, row0, n, base + 2 * dim, 3 * dim);
  }
}

// ---------------------------------------------------------------- f32 inputs, TF32 products
// The same two kernels for f32 tensors (see Note [Tensor-core attention]), with eight warps
// per block (below): mma.sync m16n8k8
// .tf32 with fp32 accumulators; fragments are read with plain 32- and 64-bit shared loads
// (ldmatrix moves 16-bit pairs). kSplit picks how an f32 operand becomes TF32:
// - false (MatmulPrecision::kTf32): tiles hold f32 rounded to TF32 (cvt.rna) as they are
//   loaded, and P and dS as they are stored; one mma per product, like cuBLAS's TF32.
// - true (strict fp32, "3xTF32"): tiles hold the f32 values; each operand x splits into
//   big = tf32(x) and small = tf32(x - big), and a b = big_a big_b + (small_a big_b +
//   big_a small_b), the small terms summed in accumulators of their own and added at the end
//   (small_a small_b, ~2^-22 of the product, is dropped).
//   About 22 of f32's 24 significand bits: fp32 accuracy (the fp32 torchvision parity test
//   holds) on tensor cores, faster than the SIMT kernels.
//
// Fragment layouts (PTX ISA, "mma.m16n8k8" .tf32): with g = lane / 4 and c = lane % 4, A (16 x 8)
// holds (g, c), (g + 8, c), (g, c + 4), (g + 8, c + 4); B (8 x 8) holds (c, g), (c + 4, g); the
// accumulator is that of m16n8k16. A product sums over k, so any permutation of k applied to A
// and B alike gives the same result: all fragments here take k = 2c where the ISA has c and
// k = 2c + 1 where it has c + 4. Then a lane's A elements of one row are adjacent (one 64-bit
// load).
namespace tf32 {

constexpr int kStride = kTile + 8;  // floats per shared row (288 bytes): the 64-bit loads of a
                                    // half-warp, rows g < 4, columns 2c, hit distinct banks
constexpr int kTileElems = kTile * kStride;
constexpr int kVec = 4;             // floats per 16-byte vector

__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float round_tf32(float x) { return __uint_as_float(to_tf32(x)); }
__device__ __forceinline__ uint32_t bits(float x) { return __float_as_uint(x); }

// c (16 x 8, f32) += a (16 x 8) b (8 x 8), TF32 operands.
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// x's big and small TF32 parts (3xTF32), from x's f32 bits.
__device__ __forceinline__ void split(uint32_t x, uint32_t& big, uint32_t& small) {
  big = to_tf32(__uint_as_float(x));
  small = to_tf32(__uint_as_float(x) - __uint_as_float(big));
}

// Fragments from row-major (kTile, kStride) float tiles (rounded to TF32 unless kSplit); k as
// permuted above (the lane's two k are k0 + 2c and k0 + 2c + 1).

// A (16 x 8) = tile[r0 .. r0 + 16)[k0 .. k0 + 8).
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const float* tile, int r0, int k0) {
  const int l = threadIdx.x % 32, g = l / 4, c = l % 4;
  const float2 top = *reinterpret_cast<const float2*>(tile + (r0 + g) * kStride + k0 + 2 * c);
  const float2 bottom = *reinterpret_cast<const float2*>(tile + (r0 + g + 8) * kStride + k0 + 2 * c);
  a[0] = bits(top.x);
  a[1] = bits(bottom.x);
  a[2] = bits(top.y);
  a[3] = bits(bottom.y);
}

// A (16 x 8) with A[m][k] = tile[k0 + k][m0 + m].
__device__ __forceinline__ void load_a_trans(uint32_t (&a)[4], const float* tile, int k0, int m0) {
  const int l = threadIdx.x % 32, g = l / 4, c = l % 4;
  const float* p = tile + (k0 + 2 * c) * kStride + m0 + g;
  a[0] = bits(p[0]);
  a[1] = bits(p[8]);
  a[2] = bits(p[kStride]);
  a[3] = bits(p[kStride + 8]);
}

// B (8 x 8) with B[k][n] = tile[n0 + n][k0 + k] (the tile holds B^T, as K does for Q K^T).
__device__ __forceinline__ void load_b(uint32_t (&b)[2], const float* tile, int n0, int k0) {
  const int l = threadIdx.x % 32, g = l / 4, c = l % 4;
  const float2 v = *reinterpret_cast<const float2*>(tile + (n0 + g) * kStride + k0 + 2 * c);
  b[0] = bits(v.x);
  b[1] = bits(v.y);
}

// B (8 x 8) with B[k][n] = tile[k0 + k][n0 + n] (the tile holds B, as V does for P V).
__device__ __forceinline__ void load_b_trans(uint32_t (&b)[2], const float* tile, int k0, int n0) {
  const int l = threadIdx.x % 32, g = l / 4, c = l % 4;
  const float* p = tile + (k0 + 2 * c) * kStride + n0 + g;
  b[0] = bits(p[0]);
  b[1] = bits(p[kStride]);
}

// Eight warps per block for f32, two per row block: warp w owns query (or key) rows
// [16 (w % 4), +16) and columns [32 (w / 4), +32) of every product's result. The TF32 kernels
// with four warps of 16 full rows ran 2 blocks (8 warps) per SM in backward, whose 108 KB of
// tiles allow no more, and their products' dependent chains left the tensor cores mostly idle
// (profiled: docs/performance.md); the two warps of a row block combine their halves of the
// softmax's row max and sum (and backward's D) through three slots of shared memory after the
// tiles (publish_rows, softmax_rows).
constexpr int kF32Warps = 2 * kWarps;
constexpr int kF32Block = 32 * kF32Warps;
constexpr int kHalf = kTile / 2;      // columns per warp
constexpr int kHalfTiles = kHalf / 8;  // 16 x 8 accumulator tiles per warp
using HalfAcc = float[kHalfTiles][4];  // a warp's 16 x 32 fp32 result
constexpr int kRowValues = 2 * kTile;  // one exchange slot: a float per (column half, row)

struct WarpPlace {
  int row0;  // first of the warp's 16 rows
  int col0;  // first of its 32 columns
  int half;  // col0 / 32
};

__device__ __forceinline__ WarpPlace warp_place() {
  const int w = threadIdx.x / 32;
  return {16 * (w % kWarps), kHalf * (w / kWarps), w / kWarps};
}

__device__ __forceinline__ void zero(HalfAcc& acc) {
#pragma unroll
  for (int t = 0; t < kHalfTiles; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[t][e] = 0.0f;
}

// acc (16 x 32) += A (16 x 64) B (64 x 32) for the columns [col0, col0 + 32) of B, skipping the
// 8-wide chunks of k at or beyond k_limit and the n-tiles at or beyond n_limit.
// load_a_chunk(a, kc): A of k chunk kc; load_b_tile(b, kc, col): B of k chunk kc, columns
// [col, col + 8). kSplit: the fragments hold f32 and each product is three TF32 ones (see the
// section's comment).
// Under kSplit the small terms go to accumulators of their own, added at the end: each n-tile
// then has two chains of dependent mma instead of one three times as long.
template <bool kSplit, typename LoadA, typename LoadB>
__device__ __forceinline__ void warp_product(HalfAcc& acc, int k_limit, int n_limit, int col0, LoadA&& load_a_chunk,
                                             LoadB&& load_b_tile) {
  HalfAcc small;
  if (kSplit) zero(small);
#pragma unroll
  for (int kc = 0; kc < kTile / 8; ++kc) {
    if (8 * kc < k_limit) {
      uint32_t a[4], a_small[4];
      load_a_chunk(a, kc);
      if (kSplit)
#pragma unroll
        for (int i = 0; i < 4; ++i) split(a[i], a[i], a_small[i]);
#pragma unroll
      for (int nt = 0; nt < kHalfTiles; ++nt) {
        if (col0 + 8 * nt < n_limit) {
          uint32_t b[2];
          load_b_tile(b, kc, col0 + 8 * nt);
          if (kSplit) {
            uint32_t b_small[2];
            split(b[0], b[0], b_small[0]);
            split(b[1], b[1], b_small[1]);
            mma(small[nt], a_small, b[0], b[1]);
            mma(small[nt], a, b_small[0], b_small[1]);
          }
          mma(acc[nt], a, b[0], b[1]);
        }
      }
    }
  }
  if (kSplit)
#pragma unroll
    for (int nt = 0; nt < kHalfTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[nt][e] += small[nt][e];
}

// Writes a warp's accumulators to rows [row0, row0 + 16), columns [col0, col0 + 32) of a tile,
// rounded to TF32 if kRound (operands of a later product) or as they are.
template <bool kRound>
__device__ __forceinline__ void store_acc(const HalfAcc& acc, float* tile, int row0, int col0) {
  const int l = threadIdx.x % 32, g = l / 4, c = l % 4;
#pragma unroll
  for (int t = 0; t < kHalfTiles; ++t) {
    float* p = tile + (row0 + g) * kStride + col0 + 8 * t + 2 * c;
    float2 top = make_float2(acc[t][0], acc[t][1]), bottom = make_float2(acc[t][2], acc[t][3]);
    if (kRound) {
      top = make_float2(round_tf32(top.x), round_tf32(top.y));
      bottom = make_float2(round_tf32(bottom.x), round_tf32(bottom.y));
    }
    *reinterpret_cast<float2*>(p) = top;
    *reinterpret_cast<float2*>(p + 8 * kStride) = bottom;
  }
}

// Writes the rows below n of a warp's accumulators to dst (row stride ld; row0 and col0 as in
// store_acc). A store instruction covers 32 contiguous bytes of each of 8 rows: whole 32-byte
// sectors where the rows are 32-byte aligned (as ViT's are).
__device__ __forceinline__ void store_global(const HalfAcc& acc, int row0, int col0, int n, float* __restrict__ dst,
                                             int64_t ld) {
  const int l = threadIdx.x % 32, g = l / 4, c = l % 4;
#pragma unroll
  for (int t = 0; t < kHalfTiles; ++t) {
    float* p = dst + (row0 + g) * ld + col0 + 8 * t + 2 * c;
    if (row0 + g < n) *reinterpret_cast<float2*>(p) = make_float2(acc[t][0], acc[t][1]);
    if (row0 + g + 8 < n) *reinterpret_cast<float2*>(p + 8 * ld) = make_float2(acc[t][2], acc[t][3]);
  }
}

// As the 16-bit load_tiles, for f32 and kF32Block threads, each element rounded to TF32 if kRound.
template <int kCount, bool kRound>
__device__ __forceinline__ void load_tiles(const float* __restrict__ src, int64_t ld, int64_t slice_stride, int n,
                                           float* tiles) {
  constexpr int kVecsPerTile = kTile * kTile / kVec;
  static_assert(kCount * kVecsPerTile % kF32Block == 0, "whole rounds");
#pragma unroll 4
  for (int it = 0; it < kCount * kVecsPerTile / kF32Block; ++it) {
    const int idx = threadIdx.x + it * kF32Block;
    const int s = idx / kVecsPerTile, r = (idx / (kTile / kVec)) % kTile, c = (idx % (kTile / kVec)) * kVec;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < n) {
      v = *reinterpret_cast<const float4*>(src + r * ld + s * slice_stride + c);
      if (kRound) v = make_float4(round_tf32(v.x), round_tf32(v.y), round_tf32(v.z), round_tf32(v.w));
    }
    *reinterpret_cast<float4*>(tiles + s * kTileElems + r * kStride + c) = v;
  }
}

// Publishes a warp's per-row values (rows g and g + 8 of its 16, the same in the four lanes of a
// quad) in slot[half][row] for the other warp of its row block.
__device__ __forceinline__ void publish_rows(float* slot, const WarpPlace& w, const float (&v)[2]) {
  const int l = threadIdx.x % 32, g = l / 4;
  if (l % 4 == 0) {
    slot[w.half * kTile + w.row0 + g] = v[0];
    slot[w.half * kTile + w.row0 + g + 8] = v[1];
  }
}

// Sums v over the quad's four lanes (a row's 2 x 4 columns of each n-tile).
__device__ __forceinline__ void quad_sum(float (&v)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    v[r] += __shfl_xor_sync(0xffffffffu, v[r], 1);
    v[r] += __shfl_xor_sync(0xffffffffu, v[r], 2);
  }
}

// In place, the warp's 16 x 32 scores become their part of softmax(scale * scores) over the
// row's n keys, both halves combined through xchg (two slots); keys >= n get 0. Every warp of
// the block calls it (it holds two block barriers); `active` warps compute.
__device__ __forceinline__ void softmax_rows(HalfAcc& p, const WarpPlace& w, bool active, int n, float scale_log2,
                                             float* xchg) {
  const int l = threadIdx.x % 32, g = l / 4, c = l % 4;
  float row_max[2] = {-INFINITY, -INFINITY};  // rows g and g + 8
  if (active) {
#pragma unroll
    for (int t = 0; t < kHalfTiles; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (w.col0 + 8 * t + 2 * c + (e & 1) >= n) p[t][e] = -INFINITY;
        row_max[e / 2] = fmaxf(row_max[e / 2], p[t][e]);
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 1));
      row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 2));
    }
    publish_rows(xchg, w, row_max);
  }
  __syncthreads();
  float sum[2] = {0.0f, 0.0f};
  if (active) {
    // Key 0 is valid, so the row's max is finite, and a half with no valid key gets exp2(-inf) = 0.
    for (int r = 0; r < 2; ++r) {
      const int row = w.row0 + g + 8 * r;
      row_max[r] = fmaxf(xchg[row], xchg[kTile + row]);
    }
#pragma unroll
    for (int t = 0; t < kHalfTiles; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        p[t][e] = exp2f((p[t][e] - row_max[e / 2]) * scale_log2);
        sum[e / 2] += p[t][e];
      }
    quad_sum(sum);
    publish_rows(xchg + kRowValues, w, sum);
  }
  __syncthreads();
  if (active) {
    float inv[2];
    for (int r = 0; r < 2; ++r) {
      const int row = w.row0 + g + 8 * r;
      inv[r] = 1.0f / (xchg[kRowValues + row] + xchg[kRowValues + kTile + row]);
    }
#pragma unroll
    for (int t = 0; t < kHalfTiles; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) p[t][e] *= inv[e / 2];
  }
}

// O = softmax(scale q k^T) v; grid B * H, kF32Block threads. The row block's P goes through its
// own rows of the q tile (no other row block reads them) to feed P V.
template <bool kSplit>
__global__ void __launch_bounds__(kF32Block) mha_forward_kernel(const float* __restrict__ qkv,
                                                                 float* __restrict__ out, int n, int heads,
                                                                 float scale_log2) {
  extern __shared__ __align__(16) unsigned char smem[];
  float* q = reinterpret_cast<float*>(smem);  // (64, kStride) each: q, k, v; then the exchange slots
  float* k = q + kTileElems;
  float* v = k + kTileElems;
  float* xchg = v + kTileElems;
  const int64_t b = blockIdx.x / heads, h = blockIdx.x % heads, dim = static_cast<int64_t>(heads) * kTile;
  load_tiles<kForwardTiles, !kSplit>(qkv + b * n * 3 * dim + h * kTile, 3 * dim, dim, n, q);
  __syncthreads();
  const WarpPlace w = warp_place();
  const bool active = w.row0 < n;  // warps of only padding rows skip the work, not the barriers
  HalfAcc p;
  if (active) {
    zero(p);
    warp_product<kSplit>(
        p, kTile, n, w.col0, [&](uint32_t(&a)[4], int kc) { load_a(a, q, w.row0, 8 * kc); },
        [&](uint32_t(&bf)[2], int kc, int col) { load_b(bf, k, col, 8 * kc); });
  }
  softmax_rows(p, w, active, n, scale_log2, xchg);  // its first barrier: the row block's q rows are read
  if (active) store_acc<!kSplit>(p, q, w.row0, w.col0);
  __syncthreads();  // both halves of P
  if (active) {
    HalfAcc o;
    zero(o);
    warp_product<kSplit>(
        o, n, kTile, w.col0, [&](uint32_t(&a)[4], int kc) { load_a(a, q, w.row0, 8 * kc); },
        [&](uint32_t(&bf)[2], int kc, int col) { load_b_trans(bf, v, 8 * kc, col); });
    store_global(o, w.row0, w.col0, n, out + b * n * dim + h * kTile, dim);
  }
}

// dqkv from qkv and dO; grid B * H, kF32Block threads. Per warp, query rows [row0, row0 + 16)
// and key columns [col0, col0 + 32): P, dP = dO V^T, D = rowsum(P * dP) (both halves), dS = P
// (dP - D) scale, into shared tiles; then, per warp, head columns [col0, col0 + 32) of dQ = dS K
// for its query rows and of dV = P^T dO, dK = dS^T Q for its key rows.
template <bool kSplit>
__global__ void __launch_bounds__(kF32Block) mha_backward_kernel(const float* __restrict__ qkv,
                                                                  const float* __restrict__ dout,
                                                                  float* __restrict__ dqkv, int n, int heads,
                                                                  float scale, float scale_log2) {
  extern __shared__ __align__(16) unsigned char smem[];
  float* q = reinterpret_cast<float*>(smem);  // (64, kStride) each: q, k, v, dO, P, dS; then the exchange slots
  float* k = q + kTileElems;
  float* v = k + kTileElems;
  float* dO = v + kTileElems;
  float* p_tile = dO + kTileElems;
  float* ds_tile = p_tile + kTileElems;
  float* xchg = ds_tile + kTileElems;
  const int64_t b = blockIdx.x / heads, h = blockIdx.x % heads, dim = static_cast<int64_t>(heads) * kTile;
  load_tiles<3, !kSplit>(qkv + b * n * 3 * dim + h * kTile, 3 * dim, dim, n, q);
  load_tiles<1, !kSplit>(dout + b * n * dim + h * kTile, dim, 0, n, dO);
  __syncthreads();

  const int g = (threadIdx.x % 32) / 4;
  const WarpPlace w = warp_place();
  const bool active = w.row0 < n;
  HalfAcc p, ds;
  if (active) {
    zero(p);
    warp_product<kSplit>(
        p, kTile, n, w.col0, [&](uint32_t(&a)[4], int kc) { load_a(a, q, w.row0, 8 * kc); },
        [&](uint32_t(&bf)[2], int kc, int col) { load_b(bf, k, col, 8 * kc); });
  }
  softmax_rows(p, w, active, n, scale_log2, xchg);
  if (active) {
    // Padded query rows get P = 0 (their dO is 0 too), so they add nothing to dV and dK.
#pragma unroll
    for (int t = 0; t < kHalfTiles; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (w.row0 + g + 8 * (e / 2) >= n) p[t][e] = 0.0f;
    zero(ds);
    warp_product<kSplit>(
        ds, kTile, n, w.col0, [&](uint32_t(&a)[4], int kc) { load_a(a, dO, w.row0, 8 * kc); },
        [&](uint32_t(&bf)[2], int kc, int col) { load_b(bf, v, col, 8 * kc); });  // dP = dO V^T
    float d[2] = {0.0f, 0.0f};  // this half's part of D for rows g and g + 8
#pragma unroll
    for (int t = 0; t < kHalfTiles; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) d[e / 2] += p[t][e] * ds[t][e];
    quad_sum(d);
    publish_rows(xchg + 2 * kRowValues, w, d);
  }
  __syncthreads();  // D's halves
  if (active) {
    float d[2];
    for (int r = 0; r < 2; ++r) {
      const int row = w.row0 + g + 8 * r;
      d[r] = xchg[2 * kRowValues + row] + xchg[2 * kRowValues + kTile + row];
    }
#pragma unroll
    for (int t = 0; t < kHalfTiles; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[t][e] = p[t][e] * (ds[t][e] - d[e / 2]) * scale;
    store_acc<!kSplit>(p, p_tile, w.row0, w.col0);
    store_acc<!kSplit>(ds, ds_tile, w.row0, w.col0);
  }
  __syncthreads();  // P and dS complete
  if (active) {
    float* base = dqkv + b * n * 3 * dim + h * kTile;
    HalfAcc acc;
    zero(acc);
    warp_product<kSplit>(
        acc, n, kTile, w.col0, [&](uint32_t(&a)[4], int kc) { load_a(a, ds_tile, w.row0, 8 * kc); },
        [&](uint32_t(&bf)[2], int kc, int col) { load_b_trans(bf, k, 8 * kc, col); });  // dQ = dS K
    store_global(acc, w.row0, w.col0, n, base, 3 * dim);
    zero(acc);
    warp_product<kSplit>(
        acc, n, kTile, w.col0, [&](uint32_t(&a)[4], int kc) { load_a_trans(a, ds_tile, 8 * kc, w.row0); },
        [&](uint32_t(&bf)[2], int kc, int col) { load_b_trans(bf, q, 8 * kc, col); });  // dK = dS^T Q
    store_global(acc, w.row0, w.col0, n, base + dim, 3 * dim);
    zero(acc);
    warp_product<kSplit>(
        acc, n, kTile, w.col0, [&](uint32_t(&a)[4], int kc) { load_a_trans(a, p_tile, 8 * kc, w.row0); },
        [&](uint32_t(&bf)[2], int kc, int col) { load_b_trans(bf, dO, 8 * kc, col); });  // dV = P^T dO
    store_global(acc, w.row0, w.col0, n, base + 2 * dim, 3 * dim);
  }
}

// Dynamic shared memory of an f32 kernel: its tiles and three exchange slots.
constexpr size_t tile_bytes(int tiles) {
  return (static_cast<size_t>(tiles) * kTileElems + 3 * kRowValues) * sizeof(float);
}

}  // namespace tf32

// Calls fn(T{}) for bf16 and f16.
template <typename Fn>
void dispatch_half(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::kBF16: fn(__nv_bfloat16{}); return;
    case DType::kF16: fn(__half{}); return;
    default: break;
  }
  VITDDP_ASSERT(false, op, ": tensor-core kernels take bf16 and f16, got ", dtype_name(dtype));
}

constexpr size_t tile_bytes(int tiles) { return static_cast<size_t>(tiles) * kTileElems * 2; }

}  // namespace

bool tc_attention_fits(DType dtype, int64_t seq_len, int64_t head_dim) {
  return (dtype == DType::kBF16 || dtype == DType::kF16 || dtype == DType::kF32) && head_dim == kTcHeadDim &&
         seq_len >= 1 && seq_len <= kTcMaxSeqLen;
}

void mha_forward_tc(const Tensor& qkv, int64_t num_heads, const Tensor& out) {
  const int64_t b = qkv.size(0), n = qkv.size(1), hd = qkv.size(2) / 3 / num_heads;
  VITDDP_ASSERT(tc_attention_fits(qkv.dtype(), n, hd), "mha_forward_tc: shape does not fit");
  const float scale_log2 = kLog2e / sqrtf(static_cast<float>(hd));
  if (qkv.dtype() == DType::kF32) {
    constexpr size_t bytes = tf32::tile_bytes(kForwardTiles);  // 55 KB: four blocks (32 warps) per SM
    // 3xTF32 unless f32 products may run as TF32 (MatmulPrecision::kTf32).
    auto kernel = matmul_precision() == MatmulPrecision::kTf32 ? tf32::mha_forward_kernel<false>
                                                               : tf32::mha_forward_kernel<true>;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    kernel<<<static_cast<unsigned>(b * num_heads), tf32::kF32Block, bytes, current_stream()>>>(
        qkv.data<float>(), out.data<float>(), static_cast<int>(n), static_cast<int>(num_heads), scale_log2);
    CUDA_CHECK_LAUNCH();
    return;
  }
  constexpr size_t bytes = tile_bytes(kForwardTiles);
  static_assert(bytes <= 48 * 1024, "no opt-in needed");
  dispatch_half(qkv.dtype(), "multi_head_attention", [&](auto zero) {
    using T = decltype(zero);
    mha_forward_tc_kernel<T><<<static_cast<unsigned>(b * num_heads), kTcBlock, bytes, current_stream()>>>(
        qkv.data<T>(), out.data<T>(), static_cast<int>(n), static_cast<int>(num_heads), scale_log2);
    CUDA_CHECK_LAUNCH();
  });
}

void mha_backward_tc(const Tensor& qkv, const Tensor& dout, int64_t num_heads, const Tensor& dqkv) {
  const int64_t b = qkv.size(0), n = qkv.size(1), hd = qkv.size(2) / 3 / num_heads;
  VITDDP_ASSERT(tc_attention_fits(qkv.dtype(), n, hd), "mha_backward_tc: shape does not fit");
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  if (qkv.dtype() == DType::kF32) {
    constexpr size_t bytes = tf32::tile_bytes(kBackwardTiles);  // 110 KB: two blocks (16 warps) per SM
    auto kernel = matmul_precision() == MatmulPrecision::kTf32 ? tf32::mha_backward_kernel<false>
                                                               : tf32::mha_backward_kernel<true>;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    kernel<<<static_cast<unsigned>(b * num_heads), tf32::kF32Block, bytes, current_stream()>>>(
        qkv.data<float>(), dout.data<float>(), dqkv.data<float>(), static_cast<int>(n), static_cast<int>(num_heads),
        scale, scale * kLog2e);
    CUDA_CHECK_LAUNCH();
    return;
  }
  constexpr size_t bytes = tile_bytes(kBackwardTiles);  // 54 KB: four blocks per SM
  dispatch_half(qkv.dtype(), "multi_head_attention backward", [&](auto zero) {
    using T = decltype(zero);
    CUDA_CHECK(cudaFuncSetAttribute(mha_backward_tc_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(bytes)));
    mha_backward_tc_kernel<T><<<static_cast<unsigned>(b * num_heads), kTcBlock, bytes, current_stream()>>>(
        qkv.data<T>(), dout.data<T>(), dqkv.data<T>(), static_cast<int>(n), static_cast<int>(num_heads), scale,
        scale * kLog2e);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace vitddp::cuda
