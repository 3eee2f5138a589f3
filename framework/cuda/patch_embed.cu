#include "framework/cuda/check.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/patch_embed.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {

// One thread per patch element: patches[row, col] <-> images[b, c, ph*p + ky, pw*p + kx] with
// row = (b*nh + ph)*nw + pw and col = (c*p + ky)*p + kx. kToPatches picks the direction.
template <typename T, bool kToPatches>
__global__ void patch_kernel(T* images, T* patches, int64_t channels, int64_t height, int64_t width, int64_t p,
                             int64_t n) {
  const int64_t nh = height / p, nw = width / p, cols = channels * p * p;
  VITDDP_GRID_STRIDE_LOOP(i, n) {
    int64_t row = i / cols, col = i % cols;
    int64_t kx = col % p, ky = (col / p) % p, c = col / (p * p);
    int64_t pw = row % nw, ph = (row / nw) % nh, b = row / (nw * nh);
    int64_t pixel = ((b * channels + c) * height + ph * p + ky) * width + pw * p + kx;
    if (kToPatches)
      patches[i] = images[pixel];
    else
      images[pixel] = patches[i];
  }
}

}  // namespace

void patchify(const Tensor& images, int64_t patch, const Tensor& patches) {
  const int64_t n = patches.numel();
  dispatch_floating(images.dtype(), "patchify", [&](auto zero) {
    using T = decltype(zero);
    patch_kernel<T, true><<<grid_for(n), kThreads, 0, current_stream()>>>(
        images.data<T>(), patches.data<T>(), images.size(1), images.size(2), images.size(3), patch, n);
    CUDA_CHECK_LAUNCH();
  });
}

void unpatchify(const Tensor& dpatches, int64_t patch, const Tensor& dimages) {
  const int64_t n = dpatches.numel();
  dispatch_floating(dimages.dtype(), "unpatchify", [&](auto zero) {
    using T = decltype(zero);
    patch_kernel<T, false><<<grid_for(n), kThreads, 0, current_stream()>>>(
        dimages.data<T>(), dpatches.data<T>(), dimages.size(1), dimages.size(2), dimages.size(3), patch, n);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace vitddp::cuda
