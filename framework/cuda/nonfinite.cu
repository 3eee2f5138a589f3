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

namespace {

__global__ void mark_nonfinite_kernel(const float* x, int64_t n, unsigned long long* flag) {
  bool bad = false;
  VITDDP_GRID_STRIDE_LOOP(i, n) bad |= !isfinite(x[i]);
  if (bad) *flag = 1;  // every writer writes the same value
}

template <typename T>  // bits copied: float for f32, unsigned short for bf16 and f16
__global__ void copy_unless_flagged_kernel(T* dst, const T* src, int64_t n, const int64_t* flag) {
  if (*flag != 0) return;
  VITDDP_GRID_STRIDE_LOOP(i, n) dst[i] = src[i];
}

template <typename T>
__global__ void scale_cast_kernel(const float* src, float scale, T* dst, int64_t n) {
  VITDDP_GRID_STRIDE_LOOP(i, n) {
    const float v = src[i] * scale;
    dst[i] = from_f<T>(isfinite(v) ? v : __int_as_float(0x7fc00000));  // NaN
  }
}

template <typename T>
__global__ void widen_kernel(const T* src, float* dst, int64_t n, int64_t* record, int64_t value) {
  bool inf = false;
  VITDDP_GRID_STRIDE_LOOP(i, n) {
    const float v = to_f(src[i]);
    dst[i] = v;
    inf |= isinf(v);
  }
  if (inf) *record = value;
}

void check_16bit(const Tensor& t, int64_t numel, const char* op) {
  VITDDP_CHECK(t.is_contiguous() && t.device().is_cuda() && t.numel() == numel &&
                   (t.dtype() == DType::kF16 || t.dtype() == DType::kBF16),
               op, ": needs a contiguous f16/bf16 CUDA tensor of ", numel, " elements, got ", t.description());
}

void check_f32(const Tensor& t, const char* op) {
  VITDDP_CHECK(t.dtype() == DType::kF32 && t.is_contiguous() && t.device().is_cuda(), op,
               ": needs a contiguous f32 CUDA tensor, got ", t.description());
}

void check_flag(const Tensor& flag, const char* op) {
  VITDDP_CHECK(flag.dtype() == DType::kI64 && flag.numel() >= 1 && flag.device().is_cuda(), op,
               ": the flag must be an i64 CUDA tensor, got ", flag.description());
}

}  // namespace

void mark_nonfinite(const Tensor& x, const Tensor& flag) {
  check_f32(x, "mark_nonfinite");
  check_flag(flag, "mark_nonfinite");
  const int64_t n = x.numel();
  if (n == 0) return;
  mark_nonfinite_kernel<<<grid_for(n), kThreads, 0, current_stream()>>>(
      x.data<float>(), n, reinterpret_cast<unsigned long long*>(flag.data<int64_t>()));
  CUDA_CHECK_LAUNCH();
}

void copy_unless_flagged(const Tensor& dst, const Tensor& src, const Tensor& flag) {
  for (const Tensor* t : {&dst, &src})
    VITDDP_CHECK((t->dtype() == DType::kF32 || t->dtype() == DType::kBF16 || t->dtype() == DType::kF16) &&
                     t->is_contiguous() && t->device().is_cuda(),
                 "copy_unless_flagged: needs a contiguous f32, bf16 or f16 CUDA tensor, got ", t->description());
  check_flag(flag, "copy_unless_flagged");
  VITDDP_CHECK(dst.numel() == src.numel() && dst.dtype() == src.dtype(), "copy_unless_flagged: ", dst.description(),
               " vs ", src.description());
  const int64_t n = dst.numel();
  if (n == 0) return;
  if (dst.dtype() == DType::kF32)
    copy_unless_flagged_kernel<float><<<grid_for(n), kThreads, 0, current_stream()>>>(
        dst.data<float>(), src.data<float>(), n, flag.data<int64_t>());
  else
    copy_unless_flagged_kernel<unsigned short><<<grid_for(n), kThreads, 0, current_stream()>>>(
        static_cast<unsigned short*>(dst.data_ptr()), static_cast<const unsigned short*>(src.data_ptr()), n,
        flag.data<int64_t>());
  CUDA_CHECK_LAUNCH();
}

void scale_cast_nonfinite_as_nan(const Tensor& src, double scale, const Tensor& dst) {
  check_f32(src, "scale_cast_nonfinite_as_nan");
  check_16bit(dst, src.numel(), "scale_cast_nonfinite_as_nan");
  const int64_t n = src.numel();
  if (n == 0) return;
  const float s = static_cast<float>(scale);
  if (dst.dtype() == DType::kF16) {
    scale_cast_kernel<__half><<<grid_for(n), kThreads, 0, current_stream()>>>(
        src.data<float>(), s, static_cast<__half*>(dst.data_ptr()), n);
  } else {
    scale_cast_kernel<__nv_bfloat16><<<grid_for(n), kThreads, 0, current_stream()>>>(
        src.data<float>(), s, static_cast<__nv_bfloat16*>(dst.data_ptr()), n);
  }
  CUDA_CHECK_LAUNCH();
}

void widen_recording_inf(const Tensor& src, const Tensor& dst, const Tensor& record, int64_t slot, int64_t value) {
  check_f32(dst, "widen_recording_inf");
  check_16bit(src, dst.numel(), "widen_recording_inf");
  check_flag(record, "widen_recording_inf");
  VITDDP_CHECK(slot >= 0 && slot < record.numel(), "widen_recording_inf: slot ", slot, " outside ",
               record.description());
  const int64_t n = dst.numel();
  if (n == 0) return;
  int64_t* r = record.data<int64_t>() + slot;
  if (src.dtype() == DType::kF16) {
    widen_kernel<__half><<<grid_for(n), kThreads, 0, current_stream()>>>(static_cast<const __half*>(src.data_ptr()),
                                                                         dst.data<float>(), n, r, value);
  } else {
    widen_kernel<__nv_bfloat16><<<grid_for(n), kThreads, 0, current_stream()>>>(
        static_cast<const __nv_bfloat16*>(src.data_ptr()), dst.data<float>(), n, r, value);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp::cuda
