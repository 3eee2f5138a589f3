// CPU patchify / un-patchify kernels for patch_embed, f32 and f64, on contiguous tensors. The
// matrix product itself is cpu::linear_forward / linear_backward.
#pragma once

#include <cstdint>

#include "framework/core/tensor.h"

namespace vitddp::cpu {

// images (B, C, H, W) -> patches (B * nh * nw, C * p * p): row b * nh * nw + ph * nw + pw,
// column c * p * p + ky * p + kx holds images[b, c, ph * p + ky, pw * p + kx].
void patchify(const Tensor& images, int64_t patch, const Tensor& patches);
// The inverse scatter (patches do not overlap): dimages (B, C, H, W) from dpatches.
void unpatchify(const Tensor& dpatches, int64_t patch, const Tensor& dimages);

}  // namespace vitddp::cpu
