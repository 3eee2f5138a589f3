#include "framework/cuda/check.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/nonfinite.h"
#include "framework/cuda/op_profiler.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {

__global__ void reset_kernel(unsigned long long* flag) { *flag = 0x7fffffffffffffffull; }

// Exponent bits of a non-finite value (all ones) for each element type, replicated over the
// elements that share one 32-bit word.
template <typename T>
struct NonfiniteBits;
template <>
struct NonfiniteBits<float> {
  static constexpr uint32_t kMask = 0x7F800000u;
  __device__ static bool any(uint32_t w) { return (w & kMask) == kMask; }
};
template <>
struct NonfiniteBits<__nv_bfloat16> {
  static constexpr uint32_t kMask = 0x7F80u;
  __device__ static bool any(uint32_t w) { return (w & kMask) == kMask || ((w >> 16) & kMask) == kMask; }
};
template <>
struct NonfiniteBits<__half> {
  static constexpr uint32_t kMask = 0x7C00u;
  __device__ static bool any(uint32_t w) { return (w & kMask) == kMask || ((w >> 16) & kMask) == kMask; }
};

// The whole gradient buffer is read every step, so the scan is bandwidth-bound: 16-byte loads
// tested on their bits, and the exact index looked up only inside a word that failed. One
// atomic per thread that found something (normally none).
template <typename T>
__global__ void first_nonfinite_kernel(const T* g, int64_t n, bool vectorized, unsigned long long* flag) {
  constexpr int kPerVec = 16 / sizeof(T);
  unsigned long long found = ~0ull;
  const int64_t nvec = vectorized ? n / kPerVec : 0;
  const uint4* vec = reinterpret_cast<const uint4*>(g);
  VITDDP_GRID_STRIDE_LOOP(i, nvec) {
    const uint4 w = __ldcs(vec + i);  // streamed: not worth keeping in L2
    if (NonfiniteBits<T>::any(w.x) || NonfiniteBits<T>::any(w.y) || NonfiniteBits<T>::any(w.z) ||
        NonfiniteBits<T>::any(w.w)) {
      for (int k = 0; k < kPerVec; ++k)
        if (!isfinite(to_f(g[i * kPerVec + k]))) {
          found = min(found, static_cast<unsigned long long>(i * kPerVec + k));
          break;
        }
    }
  }
  const int64_t tail = n - nvec * kPerVec;
  VITDDP_GRID_STRIDE_LOOP(j, tail) {
    const int64_t i = nvec * kPerVec + j;
    if (!isfinite(to_f(g[i]))) found = min(found, static_cast<unsigned long long>(i));
  }
  if (found != ~0ull) atomicMin(flag, found);
}

}  // namespace

void first_nonfinite(const Tensor& grads, const Tensor& flag) {
  OpScope scope("nonfinite check");
  auto* f = reinterpret_cast<unsigned long long*>(flag.data<int64_t>());
  reset_kernel<<<1, 1, 0, current_stream()>>>(f);
  CUDA_CHECK_LAUNCH();
  const int64_t n = grads.numel();
  dispatch_floating(grads.dtype(), "nonfinite check", [&](auto zero) {
    using T = decltype(zero);
    const T* g = grads.data<T>();
    const bool vectorized = reinterpret_cast<uintptr_t>(g) % 16 == 0;
    // A few waves of resident blocks, each striding over the buffer.
    const unsigned blocks = std::min<unsigned>(grid_for(vectorized ? n / (16 / sizeof(T)) : n), 132u * 8u);
    first_nonfinite_kernel<T><<<blocks, kThreads, 0, current_stream()>>>(g, n, vectorized, f);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace vitddp::cuda
