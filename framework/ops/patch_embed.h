// Patch embedding: a Conv2d with kernel = stride = patch, computed as patchify + matmul, and
// already flattened and transposed as torchvision does after its conv_proj:
// conv(x).reshape(B, D, nh*nw).permute(0, 2, 1).
#pragma once

#include "framework/core/tensor.h"

namespace vitddp {

// images (B, C, H, W), weight (D, C, p, p), bias (D) -> (B, (H/p)*(W/p), D), patches in
// row-major (h, w) order. H and W must be divisible by p.
Tensor patch_embed(const Tensor& images, const Tensor& weight, const Tensor& bias, int64_t patch);

}  // namespace vitddp
