// PowerSGD's two products, P = M Q and Q = M^T P, as passes of their own over a group of a
// bucket's matrices (LowRankGroup, framework/cpu/low_rank.h), the first fused with the
// compensation M = gradient + error: one read of the gradient and the error, one write of M, and
// P out of the same pass. Note [PowerSGD's products as bucket passes] in the .cu says why.
#pragma once

#include "framework/core/tensor.h"
#include "framework/cpu/low_rank.h"

namespace vitddp {

// Throws vitddp::Error unless grad (any floating dtype) and the buffers laid out like it (error,
// m: f32 or grad's dtype, m's like error's) hold the group, p and q (f32) its factors, and a
// defined sent_p (f32) P's rows as p holds them.
void check_projection(const Tensor& grad, const Tensor& error, const Tensor& m, const Tensor& p, const Tensor& q,
                      const LowRankGroup& group, const char* op, const Tensor& sent_p = Tensor());

namespace cpu {
// For each matrix k of the group: M_k := grad_k + error_k - S_k Q_k^T, stored in m's dtype (m may
// be error itself: each element is read before it is written), and P_k := M_k Q_k in f32 from the
// stored M. S_k: the last step's P_k at p's places in `sent_p` (f32, apart from p), so that
// error_k - S_k Q_k^T is the error feedback when `error` holds last step's M (Note [The error
// settled a step late] in distributed/hooks/powersgd.cpp); undefined: no subtraction. Elements of
// the bucket outside the group's matrices are left alone.
void compensate_and_project(const Tensor& grad, const Tensor& error, const Tensor& sent_p, const Tensor& q,
                            const LowRankGroup& group, const Tensor& m, const Tensor& p);
// Q_k := M_k^T P_k (f32) for each matrix k of the group; m f32 or 16-bit.
void project_transposed(const Tensor& m, const Tensor& p, const LowRankGroup& group, const Tensor& q);
}  // namespace cpu

namespace cuda {
// Whether the kernels below take the group: ranks 4 and 8, rows of whole quads, and every row
// of grad, error, m, P and Q aligned to a quad (a bucket's tensors always are).
bool projection_kernels_take(const Tensor& grad, const Tensor& error, const Tensor& m, const Tensor& p,
                             const Tensor& q, const LowRankGroup& group);
// As cpu:: above; each throws unless projection_kernels_take. Deterministic: no atomics, so a
// replayed CUDA graph gives the eager step's bits.
void compensate_and_project(const Tensor& grad, const Tensor& error, const Tensor& sent_p, const Tensor& q,
                            const LowRankGroup& group, const Tensor& m, const Tensor& p);
void project_transposed(const Tensor& m, const Tensor& p, const LowRankGroup& group, const Tensor& q);
}  // namespace cuda

}  // namespace vitddp
