#include "framework/cpu/patch_embed.h"

#include <algorithm>

#include "framework/core/scalar_types.h"

namespace vitddp::cpu {
namespace {

// Calls fn(patch_row_ptr, image_row_ptr) for every run of p contiguous pixels, where the patch
// pointer is into the (B*Np, C*p*p) matrix and the image pointer into (B, C, H, W).
template <typename T, typename Fn>
void for_each_patch_row(T* patches, T* images, int64_t B, int64_t C, int64_t H, int64_t W, int64_t p, Fn&& fn) {
  const int64_t nh = H / p, nw = W / p, cols = C * p * p;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t ph = 0; ph < nh; ++ph)
      for (int64_t pw = 0; pw < nw; ++pw) {
        T* prow = patches + ((b * nh + ph) * nw + pw) * cols;
        for (int64_t c = 0; c < C; ++c)
          for (int64_t ky = 0; ky < p; ++ky)
            fn(prow + (c * p + ky) * p, images + ((b * C + c) * H + ph * p + ky) * W + pw * p);
      }
}

}  // namespace

void patchify(const Tensor& images, int64_t patch, const Tensor& patches) {
  dispatch_float(images.dtype(), "patch_embed", [&](auto zero) {
    using T = decltype(zero);
    const Shape& s = images.shape();
    for_each_patch_row<T>(patches.data<T>(), images.data<T>(), s[0], s[1], s[2], s[3], patch,
                          [&](T* prow, T* irow) { std::copy(irow, irow + patch, prow); });
  });
}

void unpatchify(const Tensor& dpatches, int64_t patch, const Tensor& dimages) {
  dispatch_float(dimages.dtype(), "patch_embed backward", [&](auto zero) {
    using T = decltype(zero);
    const Shape& s = dimages.shape();
    for_each_patch_row<T>(dpatches.data<T>(), dimages.data<T>(), s[0], s[1], s[2], s[3], patch,
                          [&](T* prow, T* irow) { std::copy(prow, prow + patch, irow); });
  });
}

}  // namespace vitddp::cpu
