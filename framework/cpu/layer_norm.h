// CPU layer-norm kernels over the last dim, f32 and f64, on contiguous tensors. Statistics are
// computed in double with two passes (mean, then centred sum of squares).
#pragma once

#include "framework/autograd/node.h"
#include "framework/core/tensor.h"

namespace vitddp::cpu {

// x (rows, D) -> y (rows, D); mean and rstd (rows) receive each row's mean and 1/sqrt(var + eps).
void layer_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps, const Tensor& y,
                        const Tensor& mean, const Tensor& rstd);
// Gradients for x, weight and bias; each output may be undefined (skipped); dw, db overwritten.
// dx_add, when defined (x's shape and dtype, contiguous): dx = the input gradient + dx_add, in one
// pass (Note [Sums in the producing kernel] in framework/autograd/node.h).
void layer_norm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                         const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& db,
                         GradWrite weight_grads = GradWrite::kOverwrite, const Tensor& dx_add = Tensor());

}  // namespace vitddp::cpu
