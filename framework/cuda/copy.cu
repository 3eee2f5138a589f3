#include "framework/cuda/copy.h"

#include <cmath>

#include "framework/cuda/check.h"
#include "framework/cuda/op_profiler.h"
#include "framework/cuda/dispatch.cuh"
#include "framework/cuda/stream.h"
#include "framework/cuda/strided_index.cuh"

namespace vitddp::cuda {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535 * 8)); }

template <typename D, typename S>
__global__ void copy_kernel(D* dst, StridedIndex dst_index, const S* src, StridedIndex src_index, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[dst_index.offset(i)] = from_double<D>(to_double(src[src_index.offset(i)]));
}

template <typename T>
__global__ void fill_kernel(T* dst, StridedIndex index, T value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[index.offset(i)] = value;
}

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { CUDA_WARN(cudaSetDevice(previous_)); }

 private:
  int previous_ = 0;
};

}  // namespace

void copy_tensor(const Tensor& dst, const Tensor& src) {
  OpScope scope("copy");
  VITDDP_ASSERT(dst.device() == src.device() && dst.device().is_cuda() && dst.shape() == src.shape(),
                "copy_tensor between ", src.description(), " and ", dst.description());
  const int64_t n = dst.numel();
  if (n == 0) return;
  DeviceGuard guard(dst.device().index);
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDeviceToDevice, current_stream()));
    return;
  }
  dispatch_cuda_dtype(dst.dtype(), [&](auto dst_zero) {
    using D = decltype(dst_zero);
    dispatch_cuda_dtype(src.dtype(), [&](auto src_zero) {
      using S = decltype(src_zero);
      copy_kernel<D, S><<<blocks_for(n), kThreads, 0, current_stream()>>>(static_cast<D*>(dst.data_ptr()), make_strided_index(dst),
                                                     static_cast<const S*>(src.data_ptr()),
                                                     make_strided_index(src), n);
      CUDA_CHECK_LAUNCH();
    });
  });
}

void fill_tensor(const Tensor& dst, double value) {
  OpScope scope("fill");
  const int64_t n = dst.numel();
  if (n == 0) return;
  DeviceGuard guard(dst.device().index);
  // +0 is all-zero bits in every dtype: the driver's memset is the fastest (-0 is not).
  if (value == 0.0 && !std::signbit(value) && dst.is_contiguous()) {
    CUDA_CHECK(cudaMemsetAsync(dst.data_ptr(), 0, dst.nbytes(), current_stream()));
    return;
  }
  dispatch_cuda_dtype(dst.dtype(), [&](auto zero) {
    using T = decltype(zero);
    fill_kernel<T><<<blocks_for(n), kThreads, 0, current_stream()>>>(static_cast<T*>(dst.data_ptr()), make_strided_index(dst),
                                                from_double<T>(value), n);
    CUDA_CHECK_LAUNCH();
  });
}

void memcpy_between(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  DeviceGuard guard(dst_device.is_cuda() ? dst_device.index : src_device.index);
  cudaStream_t stream = current_stream();
  if (dst_device.is_cuda() && src_device.is_cuda()) {
    CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, nbytes, stream));
    return;
  }
  // Ordered after the work already queued on the current stream. Host to device returns once
  // the host bytes are read (staged for pageable memory), so the source may be freed at once;
  // device to host is waited for, since the caller reads the bytes next.
  CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream));
  if (dst_device.is_cpu()) CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace vitddp::cuda
