// CUDA patchify / un-patchify for patch_embed (same layout as cpu/patch_embed.h); the product
// itself is cuda::linear_forward / linear_backward.
#pragma once

#include "framework/core/tensor.h"

namespace vitddp::cuda {

void patchify(const Tensor& images, int64_t patch, const Tensor& patches);
void unpatchify(const Tensor& dpatches, int64_t patch, const Tensor& dimages);

}  // namespace vitddp::cuda
