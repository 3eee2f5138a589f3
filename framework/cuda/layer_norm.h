// CUDA layer norm over the last dim, contiguous f32/bf16/f16, statistics (mean, rstd) in f32, current
// stream. Same contract as cpu/layer_norm.h: mean and rstd (rows) are outputs of forward.
#pragma once

#include "framework/autograd/node.h"
#include "framework/core/tensor.h"

namespace vitddp::cuda {

void layer_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps, const Tensor& y,
                        const Tensor& mean, const Tensor& rstd);
// Whether add_layer_norm_forward takes these inputs (same shape, contiguous): a width and
// pointers the row kernels take (outputs fresh from the allocator are aligned).
bool add_layer_norm_fits(const Tensor& a, const Tensor& a2, const Tensor& w, const Tensor& b);
// sum = a + a2 (same shape, contiguous), y = layer_norm(sum), in one kernel where the row kernels
// take the shapes and pointers (returns true); otherwise does nothing and returns false.
bool add_layer_norm_forward(const Tensor& a, const Tensor& a2, const Tensor& w, const Tensor& b, double eps,
                            const Tensor& sum, const Tensor& y, const Tensor& mean, const Tensor& rstd);
// dx_add, when defined (x's shape and dtype, contiguous): dx = the input gradient + dx_add, in one
// pass (Note [Sums in the producing kernel] in framework/autograd/node.h).
void layer_norm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                         const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& db,
                         GradWrite weight_grads = GradWrite::kOverwrite, const Tensor& dx_add = Tensor());

}  // namespace vitddp::cuda
