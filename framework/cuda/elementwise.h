// Elementwise CUDA kernels (f32/bf16/f16 unless noted), current stream. Inputs may have any
// layout (broadcast views included); outputs are contiguous unless noted.
#pragma once

#include "framework/core/tensor.h"
#include "framework/cpu/elementwise.h"

namespace vitddp::cuda {

// dst += alpha * src; same shape, dtype and device; any layout (also f64 and i64).
void add_inplace(const Tensor& dst, const Tensor& src, double alpha);
// out = a + b, the engine's sum of two gradients for one input (same shape, dtype and device;
// out contiguous): one pass, where a copy of a and then add_inplace took two. f32/bf16/f16.
void add_gradients(const Tensor& a, const Tensor& b, const Tensor& out);
// out = a (op) b with numpy broadcasting to out's shape.
void binary_forward(cpu::BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void scale_forward(const Tensor& x, double factor, const Tensor& out);

}  // namespace vitddp::cuda
