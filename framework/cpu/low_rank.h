// PowerSGD's two passes over a whole bucket, each fused into one read and one write of every
// element: before compression, the gradient plus its error feedback, widened to f32 or kept in
// the bucket's 16 bits (the matrix M that is compressed); after it, M's approximation P Q^T
// written into the bucket in the bucket's dtype while the same pass turns M into the new error
// (M - P Q^T). Unfused, the hook
// made about ten passes over the bucket per step; see docs/performance.md.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/core/tensor.h"

namespace vitddp {

// `count` row-major (n x m) matrices of a flat bucket, `stride` elements apart, the first at
// `offset`; their rank-r factors are P_k (n x r) at p_offset + k n r of the flat P buffer and
// Q_k (m x r) at q_offset + k m r of the flat Q buffer.
struct LowRankGroup {
  int64_t count = 0, n = 0, m = 0, rank = 0;
  int64_t offset = 0, stride = 0;
  int64_t p_offset = 0, q_offset = 0;
};

// The tensors a bucket sends uncompressed (biases, layer norms), as runs of its elements:
// run i is bucket[offsets[i], offsets[i] + numels[i]), and the runs lie back to back, in order,
// in a flat f32 buffer for their all-reduce.
struct BucketRuns {
  std::vector<int64_t> offsets, numels;
  int64_t total() const;
};

// Throws vitddp::Error when a run lies outside the bucket.
void check_runs_inside(const BucketRuns& runs, const Tensor& bucket, const char* op);
// Throws vitddp::Error when runs lie outside the bucket, flat does not hold them all, or a
// defined residual is not laid out like the bucket.
void check_bucket_runs(const BucketRuns& runs, const Tensor& bucket, const Tensor& flat, const char* op,
                       const Tensor& residual = Tensor());

// Throws vitddp::Error when a group's matrices or factors lie outside out, p or q (both
// backends check with it).
void check_low_rank_group(const Tensor& p, const Tensor& q, const LowRankGroup& group, const Tensor& out);

// Throws vitddp::Error "op: what" unless `a` and `b` share no byte, or are one buffer where
// same_ok: the passes (CPU and CUDA) take their buffers as unaliased.
void check_apart(const Tensor& a, const Tensor& b, bool same_ok, const char* what, const char* op);

namespace cpu {
// The error buffers below (error, out of add_widened, residual) are f32 or the bucket's own dtype
// (--powersgd-error-dtype bucket, as PyTorch's hook keeps them for 16-bit buckets).
// out := grad + error in out's dtype; grad f32/bf16/f16, all contiguous with one numel.
void add_widened(const Tensor& grad, const Tensor& error, const Tensor& out);
// out[runs] := grad[runs] + error[runs], as add_widened for the whole bucket: the elements that
// compensate_and_project (low_rank_project.h) leaves (biases, layer norms, padding).
void add_widened_runs(const Tensor& grad, const Tensor& error, const BucketRuns& runs, const Tensor& out);
// out[matrix k] := P_k Q_k^T in out's dtype (f32/bf16/f16); when `residual` (laid out like out)
// is defined, residual[matrix k] -= P_k Q_k^T too, and flag (1) i64 := 1 when any new residual,
// as stored, is NaN or Inf (left as it is otherwise).
void expand_low_rank(const Tensor& p, const Tensor& q, const LowRankGroup& group, const Tensor& out,
                     const Tensor& residual, const Tensor& flag);
// flat (f32, runs.total()) := scale * src[runs], src (f32/bf16/f16) laid out like the bucket.
void gather_runs(const Tensor& src, const BucketRuns& runs, double scale, const Tensor& flat);
// bucket[runs] := flat in the bucket's dtype; when `residual` (laid out like the bucket) is
// defined, residual[runs] -= flat too, and flag (1) i64 := 1 when any of it is NaN or Inf.
void scatter_runs(const Tensor& flat, const BucketRuns& runs, const Tensor& bucket, const Tensor& residual,
                  const Tensor& flag);
}  // namespace cpu

namespace cuda {
// As cpu:: above; one launch each (the runs: one per 96 runs, their places as kernel arguments,
// so that the host never waits for the stream).
void add_widened(const Tensor& grad, const Tensor& error, const Tensor& out);
void add_widened_runs(const Tensor& grad, const Tensor& error, const BucketRuns& runs, const Tensor& out);
void expand_low_rank(const Tensor& p, const Tensor& q, const LowRankGroup& group, const Tensor& out,
                     const Tensor& residual, const Tensor& flag);
void gather_runs(const Tensor& src, const BucketRuns& runs, double scale, const Tensor& flat);
void scatter_runs(const Tensor& flat, const BucketRuns& runs, const Tensor& bucket, const Tensor& residual,
                  const Tensor& flag);
}  // namespace cuda

}  // namespace vitddp
