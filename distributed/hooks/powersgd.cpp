#include "distributed/hooks/powersgd.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <tuple>
#include <utility>

#include <cmath>

#include "framework/core/nvtx.h"
#include "framework/core/random.h"
#include "framework/core/tensor_math.h"
#include "framework/cpu/linear.h"
#include "framework/cpu/low_rank.h"
#include "framework/cpu/low_rank_project.h"
#include "framework/cpu/orthogonalize.h"
#include "framework/cuda/linear.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/check.h"
#include "framework/cuda/context.h"
#include "framework/cuda/nonfinite.h"
#include "framework/cuda/op_profiler.h"
#include "framework/cuda/stream.h"
#endif

namespace vitddp {
namespace {

// Batched row-major products on slices, without autograd: c = a b and db = a^T dc,
// for `batch` entries placed `strides` apart (framework/core/matmul_strides.h).
void product(const Tensor& a, const Tensor& b, const Tensor& c, int64_t batch, int64_t m, int64_t k, int64_t n,
             const MatmulStrides& strides) {
  if (a.device().is_cpu()) return cpu::matmul_forward(a, b, c, batch, m, k, n, false, strides);
#if VITDDP_WITH_CUDA
  cuda::OpScope scope("powersgd products");  // --op-breakdown's row for both products
  cuda::matmul_forward(a, b, c, batch, m, k, n, false, strides);
#endif
}
void product_at_b(const Tensor& a, const Tensor& b_shape, const Tensor& dc, const Tensor& db, int64_t batch, int64_t m,
                  int64_t k, int64_t n, const MatmulStrides& strides) {
  if (a.device().is_cpu()) return cpu::matmul_backward(a, b_shape, dc, Tensor(), db, batch, m, k, n, false, strides);
#if VITDDP_WITH_CUDA
  cuda::OpScope scope("powersgd products");
  cuda::matmul_backward(a, b_shape, dc, Tensor(), db, batch, m, k, n, false, strides);
#endif
}
void orthogonalize(const Tensor& flat, const MatrixBatch& batch) {
  if (flat.device().is_cpu()) return cpu::orthogonalize_columns(flat, batch);
#if VITDDP_WITH_CUDA
  cuda::orthogonalize_columns(flat, batch);
#endif
}

void add_widened(const Tensor& grad, const Tensor& error, const Tensor& out) {
  if (out.device().is_cpu()) return cpu::add_widened(grad, error, out);
#if VITDDP_WITH_CUDA
  cuda::add_widened(grad, error, out);
#endif
}

void expand_low_rank(const Tensor& p, const Tensor& q, const LowRankGroup& group, const Tensor& out,
                     const Tensor& residual, const Tensor& flag) {
  if (out.device().is_cpu()) return cpu::expand_low_rank(p, q, group, out, residual, flag);
#if VITDDP_WITH_CUDA
  cuda::expand_low_rank(p, q, group, out, residual, flag);
#endif
}

void gather_runs(const Tensor& src, const BucketRuns& runs, double scale, const Tensor& flat) {
  if (src.device().is_cpu()) return cpu::gather_runs(src, runs, scale, flat);
#if VITDDP_WITH_CUDA
  cuda::gather_runs(src, runs, scale, flat);
#endif
}

void scatter_runs(const Tensor& flat, const BucketRuns& runs, const Tensor& bucket, const Tensor& residual,
                  const Tensor& flag) {
  if (bucket.device().is_cpu()) return cpu::scatter_runs(flat, runs, bucket, residual, flag);
#if VITDDP_WITH_CUDA
  cuda::scatter_runs(flat, runs, bucket, residual, flag);
#endif
}

// Note [PowerSGD's products as bucket passes] (framework/cuda/low_rank_project.cu).
bool projection_kernels_take(const Tensor& grad, const Tensor& error, const Tensor& m, const Tensor& p,
                             const Tensor& q, const LowRankGroup& group) {
  if (grad.device().is_cpu()) return true;
#if VITDDP_WITH_CUDA
  return cuda::projection_kernels_take(grad, error, m, p, q, group);
#else
  return false;
#endif
}

void compensate_and_project(const Tensor& grad, const Tensor& error, const Tensor& sent_p, const Tensor& q,
                            const LowRankGroup& group, const Tensor& m, const Tensor& p) {
  if (grad.device().is_cpu()) return cpu::compensate_and_project(grad, error, sent_p, q, group, m, p);
#if VITDDP_WITH_CUDA
  cuda::compensate_and_project(grad, error, sent_p, q, group, m, p);
#endif
}

void project_transposed(const Tensor& m, const Tensor& p, const LowRankGroup& group, const Tensor& q) {
  if (m.device().is_cpu()) return cpu::project_transposed(m, p, group, q);
#if VITDDP_WITH_CUDA
  cuda::project_transposed(m, p, group, q);
#endif
}

void add_widened_runs(const Tensor& grad, const Tensor& error, const BucketRuns& runs, const Tensor& out) {
  if (grad.device().is_cpu()) return cpu::add_widened_runs(grad, error, runs, out);
#if VITDDP_WITH_CUDA
  cuda::add_widened_runs(grad, error, runs, out);
#endif
}

void mark_nonfinite(const Tensor& x, const Tensor& flag) {
  if (x.device().is_cuda()) {
#if VITDDP_WITH_CUDA
    return cuda::mark_nonfinite(x, flag);
#endif
  }
  const float* v = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i)
    if (!std::isfinite(v[i])) {
      flag.data<int64_t>()[0] = 1;
      return;
    }
}

// dst := src unless the flag is set; on the GPU the kernel reads the flag, not the host.
void copy_unless_flagged(Tensor dst, const Tensor& src, const Tensor& flag) {
  if (dst.device().is_cuda()) {
#if VITDDP_WITH_CUDA
    return cuda::copy_unless_flagged(dst, src, flag);
#endif
  }
  if (flag.data<int64_t>()[0] == 0) dst.copy_(src);
}

Tensor slice_of(const Tensor& flat, int64_t offset, const Shape& shape) {
  return flat.as_strided(shape, contiguous_strides(shape), flat.storage_offset() + offset);
}

// Note [The error settled a step late]
// Decision: with error feedback and warm start, the expansion writes only P Q^T into the bucket
// and leaves M in the error buffer, keeping the P sent (`sent_p`, a few MB); the next step's
// compensation, which reads the same Q for P = M Q anyway, computes M' = gradient + M - P Q^T.
// Reason: the eager expansion also turned M into M - P Q^T, reading M and writing two arrays
// (1.8 GB a step for ViT-L in bf16, against 0.6 GB for the bucket alone). Invariant: the value is
// the same sum, rounded once less (M - P Q^T is no longer stored before the gradient is added);
// tensors sent uncompressed keep their error as before (scatter_runs); the first step subtracts
// a zero P; settle_error() subtracts in place where the error itself is wanted
// (PowerSgdHook::settle_errors()). Checkpoints keep M and the sent P as they are, so a resumed
// run is the uninterrupted one bit for bit. A non-finite M still flags the step: its row of P,
// hence every column of Q, comes out non-finite.
void settle_error(PowerSgdState::Bucket& st) {
  if (!st.sent_p.defined()) return;
  VITDDP_CHECK(!st.settle_groups.empty(), "powersgd: an error restored with its sent P is settled only after a "
               "compressed step has laid out the bucket's matrices");
  int64_t largest = 0;
  for (const LowRankGroup& g : st.settle_groups) largest = std::max(largest, g.n * g.m);
  // One matrix at a time, through the expansion into a scratch matrix: the bucket is not at hand.
  Tensor scratch = Tensor::empty({largest}, st.error.dtype(), st.error.device());
  Tensor flag = Tensor::zeros({1}, DType::kI64, st.error.device());
  for (const LowRankGroup& g : st.settle_groups)
    for (int64_t k = 0; k < g.count; ++k) {
      LowRankGroup one = g;
      one.count = 1;
      one.offset = 0;
      one.stride = g.n * g.m;
      one.p_offset = g.p_offset + k * g.n * g.rank;
      one.q_offset = g.q_offset + k * g.m * g.rank;
      expand_low_rank(st.sent_p, st.q, one, slice_of(scratch, 0, {g.n * g.m}),
                      slice_of(st.error, g.offset + k * g.stride, {g.n * g.m}), flag);
    }
  st.sent_p.fill_(0.0);
}

// How one bucket splits into compressed matrices and uncompressed tensors. Matrices of one
// shape that sit at a fixed distance in the bucket (the same weight of consecutive layers) form
// a group: its P and Q blocks are back to back, and each of the hook's three products is one
// strided-batched launch per group instead of one per matrix.
struct Plan {
  struct Matrix {
    size_t tensor;            // index into the bucket's tensors
    int64_t n, m;             // rows, columns
    int64_t p_offset, q_offset;
  };
  struct Group {
    size_t first = 0, count = 0;  // matrices[first, first + count)
    int64_t stride = 0;           // elements between consecutive matrices in the bucket
  };
  std::vector<Matrix> matrices;   // in group order
  std::vector<Group> groups;
  std::vector<LowRankGroup> low_rank;  // per group: its matrices and factors as the bucket passes take them
  std::vector<size_t> uncompressed;
  // The uncompressed tensors as runs of the bucket that lie back to back (a layer norm's weight
  // and bias, the next bias: alignment padding between them, always zero, goes along), copied
  // to and from the flat all-reduce buffer in one launch each way.
  BucketRuns runs;
  // Every element outside the compressed matrices (the runs above, padding, the gaps between a
  // group's matrices): what the compensation fused with P = M Q leaves to a pass of its own.
  BucketRuns outside_matrices;
  int64_t p_numel = 0, q_numel = 0, uncompressed_numel = 0;
  MatrixBatch p_batch;
};

Plan plan_bucket(const GradBucket& bucket, const PowerSgdOptions& o) {
  Plan plan;
  plan.p_batch.cols = o.rank;
  for (size_t t = 0; t < bucket.shapes.size(); ++t) {
    const Shape& s = bucket.shapes[t];
    const int64_t numel = shape_numel(s);
    if (s.size() < 2) {
      plan.uncompressed.push_back(t);
      plan.uncompressed_numel += numel;
      continue;
    }
    const int64_t n = s[0], m = numel / n;
    const int64_t r = std::min<int64_t>({o.rank, n, m});
    if (static_cast<double>((n + m) * r) * o.min_compression_rate >= static_cast<double>(n * m) || r < o.rank) {
      plan.uncompressed.push_back(t);
      plan.uncompressed_numel += numel;
      continue;
    }
    plan.matrices.push_back({t, n, m, 0, 0});
  }
  size_t previous = SIZE_MAX;
  for (size_t t : plan.uncompressed) {
    const int64_t at = bucket.offsets[t], numel = shape_numel(bucket.shapes[t]);
    if (!plan.runs.offsets.empty() && t == previous + 1) {  // neighbours: only padding between them
      int64_t& last_numel = plan.runs.numels.back();
      const int64_t gap = at - (plan.runs.offsets.back() + last_numel);
      if (gap >= 0 && gap < 16) {  // the arena's alignment padding at most
        last_numel += gap + numel;
        previous = t;
        continue;
      }
    }
    plan.runs.offsets.push_back(at);
    plan.runs.numels.push_back(numel);
    previous = t;
  }
  plan.uncompressed_numel = plan.runs.total();
  // Group: per shape, in bucket order, runs of matrices at a constant distance.
  std::vector<Plan::Matrix> by_shape = plan.matrices;
  std::stable_sort(by_shape.begin(), by_shape.end(), [](const Plan::Matrix& a, const Plan::Matrix& b) {
    return std::make_pair(a.n, a.m) < std::make_pair(b.n, b.m);
  });
  plan.matrices.clear();
  for (size_t i = 0; i < by_shape.size();) {
    Plan::Group g{plan.matrices.size(), 1, by_shape[i].n * by_shape[i].m};
    plan.matrices.push_back(by_shape[i]);
    size_t j = i + 1;
    for (; j < by_shape.size() && by_shape[j].n == by_shape[i].n && by_shape[j].m == by_shape[i].m; ++j) {
      const int64_t gap = bucket.offsets[by_shape[j].tensor] - bucket.offsets[by_shape[j - 1].tensor];
      if (g.count == 1) g.stride = gap;
      if (gap != g.stride || gap < by_shape[j].n * by_shape[j].m) break;
      plan.matrices.push_back(by_shape[j]);
      ++g.count;
    }
    if (g.count == 1) g.stride = by_shape[i].n * by_shape[i].m;
    plan.groups.push_back(g);
    i = j;
  }
  std::vector<std::pair<int64_t, int64_t>> taken;  // [begin, end) of each matrix in the bucket
  for (const Plan::Matrix& mx : plan.matrices)
    taken.emplace_back(bucket.offsets[mx.tensor], bucket.offsets[mx.tensor] + mx.n * mx.m);
  std::sort(taken.begin(), taken.end());
  int64_t at = 0;
  for (const auto& [begin, end] : taken) {
    if (begin > at) {
      plan.outside_matrices.offsets.push_back(at);
      plan.outside_matrices.numels.push_back(begin - at);
    }
    at = std::max(at, end);
  }
  if (bucket.buffer.numel() > at) {
    plan.outside_matrices.offsets.push_back(at);
    plan.outside_matrices.numels.push_back(bucket.buffer.numel() - at);
  }
  for (Plan::Matrix& mx : plan.matrices) {  // P and Q blocks in group order: back to back per group
    mx.p_offset = plan.p_numel;
    mx.q_offset = plan.q_numel;
    plan.p_batch.offsets.push_back(plan.p_numel);
    plan.p_batch.rows.push_back(mx.n);
    plan.p_numel += mx.n * o.rank;
    plan.q_numel += mx.m * o.rank;
  }
  for (const Plan::Group& g : plan.groups) {
    const Plan::Matrix& mx = plan.matrices[g.first];
    LowRankGroup group;
    group.count = static_cast<int64_t>(g.count);
    group.n = mx.n;
    group.m = mx.m;
    group.rank = o.rank;
    group.offset = bucket.offsets[mx.tensor];
    group.stride = g.stride;
    group.p_offset = mx.p_offset;
    group.q_offset = mx.q_offset;
    plan.low_rank.push_back(group);
  }
  return plan;
}

}  // namespace

// Note [PowerSGD and skipped steps]
// With --nonfinite skip, a step whose all-reduced gradients hold a NaN or Inf must leave the
// hook's state as it was too: a NaN in the error feedback (or in warm-started Q) would poison
// every later step. The state changes while the hook communicates, before anyone has checked,
// and the host must not wait; so each bucket writes its new error and Q to scratch (`Staged`), a
// device flag collects whether any is not finite, and after the step's last bucket one kernel
// per tensor commits them unless it is set (plain code on the CPU). Invariant: the flag agrees
// with NonfiniteCheck on every rank (a NaN or Inf in any rank's compensated gradient makes the
// all-reduced P, hence the result and every rank's new error, non-finite), and all buckets of a
// step commit or none. Cost: every new error lives until the step's last bucket. Under
// --nonfinite stop nothing stages (PowerSgdOptions::stage_state). Known gap: a new error that
// overflows while the gradients stay finite is kept; the next step then stops the run (exit 5).
struct PowerSgdHook::Staged {
  struct Entry {
    PowerSgdState::Bucket* state;
    Tensor error;   // (bucket numel) the new error (f32 or the bucket's dtype), or undefined without error feedback
    Tensor q;       // the new Q, or undefined when the bucket has no compressed matrix
    Tensor sent_p;  // the P sent, when the error is settled a step late (Note [The error settled a step late])
  };
  Tensor skip;     // (1) i64 on the device: 1 once anything new is not finite
  std::vector<Entry> entries;
  int open = 0;    // buckets of this step launched and not yet finished
  bool last_launched = false;

  void begin(const Device& device) {
    if (open > 0 || !entries.empty()) return;  // the step is already under way
    if (!skip.defined() || skip.device() != device) skip = Tensor::zeros({1}, DType::kI64, device);
    skip.fill_(0.0);
  }
  void finish(Entry entry) {
    entries.push_back(std::move(entry));
    --open;
    if (!last_launched || open > 0) return;
    for (const Entry& e : entries) {
      if (e.error.defined()) copy_unless_flagged(e.state->error, e.error, skip);
      if (e.q.defined()) copy_unless_flagged(e.state->q, e.q, skip);
      if (e.sent_p.defined()) copy_unless_flagged(e.state->sent_p, e.sent_p, skip);
    }
    entries.clear();
    last_launched = false;
  }
};

// Note [PowerSGD beside backward]
// On a GPU a bucket's compression (M = gradient + error, P = M Q, P's all-reduce, the
// orthogonalisation, Q = M^T P, Q's all-reduce) runs on a stream of the hook's own, forked from
// the compute stream when the bucket is ready. On the compute stream the wait for P's all-reduce,
// queued behind the earlier buckets' collectives, held up every backward kernel after it once per
// bucket: with P2P off, small buckets ran far slower than one huge bucket (docs/performance.md).
// On its own stream only the hook waits; the compute stream joins at the end of backward, when
// the reducer waits for each bucket's Q all-reduce and the expansion runs. Products on both
// streams need a cuBLASLt workspace each (CudaContext::workspace(stream)). What the side stream
// allocates it frees, or the compute stream frees after that join; the pool never hands a block
// freed on one stream to another by making it wait (framework/cuda/allocator.cpp). Shapes first
// seen here are autotuned (Note [Choosing a GEMM algorithm]) beside backward, with noisier timings.
struct PowerSgdHook::SideStream {
#if VITDDP_WITH_CUDA
  int device = -1;
  cuda::Stream stream;
  cuda::Event fork_point;
#endif
};

// Note [A 16-bit error]
// PowerSGD's passes over a bucket (the compensation M = gradient + error, P = M Q, Q = M^T P,
// and the expansion that writes P Q^T into the bucket and M - P Q^T into the error) read and
// write every element, and with one bucket of ViT-L's 306 M gradients they run after backward:
// in f32 about 8.4 GB a step (docs/performance.md). PyTorch's hook keeps the error in the
// bucket's dtype; the expert key `powersgd-error-dtype bucket` does the same (error and M in
// bf16 for bf16 training: about 4.8 GB), while P and Q stay f32 here: the products read the
// 16-bit M with 16-bit copies of the small factors and write f32 (cuBLASLt's bf16 x bf16 -> f32),
// and the all-reduces, the orthogonalisation and the expansion's P Q^T are f32 as before. The
// error then loses its rounding to 16 bits each step (relative 2^-8 in bf16); the non-finite
// flag looks at the error as stored, where 16 bits overflow sooner than f32. A checkpoint's
// error is converted to the run's setting when the run differs from the one that wrote it.

namespace {

// Finishes a bucket once its Q all-reduce is done (P's, with the uncompressed tensors, came
// before it on the same stream), or, for a bucket without matrices, its uncompressed all-reduce.
class PowerSgdWork final : public Work {
 public:
  struct Parts {
    std::shared_ptr<Work> q_work, flat_work;  // flat_work: only when the bucket has no matrix
    Plan plan;
    GradBucket bucket;
    Tensor work;          // M: the matrices compressed (`compensated`, the bucket itself, or a copy in M's
                          // dtype), held until the products that read it are done
    Tensor compensated;   // bucket + error, then the new error; undefined without error feedback
    // The error settled a step late: the expansion leaves M in `compensated` over the matrices.
    bool settle_late = false;
    // 16-bit copies of Q and P for the products of a 16-bit M (Note [A 16-bit error]), made on the
    // side stream and held here like `work`: freed after the compute stream's join, never on the
    // side stream after its last join (a CUDA graph capture refuses such unjoined frees).
    Tensor q_operand, p_operand;
    Tensor p, q;
    Tensor flat;  // the uncompressed tensors' average: P's tail, or a buffer of its own
    PowerSgdState::Bucket* state = nullptr;
    std::shared_ptr<PowerSgdHook::Staged> staged;
    int world = 1;
  };
  explicit PowerSgdWork(Parts parts) : p_(std::move(parts)) {}
  void wait() override {
    if (finished_) return;
    p_.q_work->wait();
    if (p_.flat_work) p_.flat_work->wait();
    NvtxRange range(nvtx_decompress_name(p_.bucket.index), NvtxColor::kCompress);
    // Q holds the sum over ranks: M ~ P (Q / world)^T.
    add_inplace(p_.q, p_.q, 1.0 / p_.world - 1.0);
    PowerSgdHook::Staged& staged = *p_.staged;
    // One pass per group writes the approximation into the bucket and, with error feedback,
    // leaves in `compensated` what was not sent: the compensated local gradient minus it.
    const Tensor residual = p_.settle_late ? Tensor() : p_.compensated;
    for (const LowRankGroup& group : p_.plan.low_rank)
      expand_low_rank(p_.p, p_.q, group, p_.bucket.buffer, residual, staged.skip);
    if (p_.flat.defined())  // the uncompressed tensors: their plain average
      scatter_runs(p_.flat, p_.plan.runs, p_.bucket.buffer, p_.compensated, staged.skip);
    PowerSgdHook::Staged::Entry entry{p_.state, Tensor(), Tensor(), Tensor()};
    if (p_.settle_late) entry.sent_p = slice_of(p_.p, 0, {p_.plan.p_numel});
    // In place (not staged) the state already is the new one; only the flag is kept.
    const bool in_place_error = p_.compensated.defined() && p_.compensated.same_impl(p_.state->error);
    if (p_.compensated.defined() && !in_place_error) entry.error = p_.compensated;
    if (!p_.plan.matrices.empty()) {
      mark_nonfinite(p_.q, staged.skip);
      if (!p_.q.same_impl(p_.state->q)) entry.q = p_.q;
    }
    finished_ = true;
    staged.finish(std::move(entry));  // See Note [PowerSGD and skipped steps]
  }
  bool done() override { return finished_; }

 private:
  Parts p_;
  bool finished_ = false;
};

}  // namespace

PowerSgdHook::PowerSgdHook(const PowerSgdOptions& options) : options_(options) {
  VITDDP_CHECK(options.rank >= 1, "powersgd: rank must be >= 1, got ", options.rank);
  VITDDP_CHECK(options.start_iter >= 0, "powersgd: start iteration must be >= 0");
}

std::string PowerSgdHook::name() const { return "powersgd(rank " + std::to_string(options_.rank) + ")"; }

std::string PowerSgdHook::summary() const {
  if (buckets_compressed_ == 0) return "";
  return "powersgd: " + std::to_string(buckets_compressed_) + " bucket compression(s) issued, " +
         std::to_string(buckets_by_passes_) + " with the products as passes, " + std::to_string(buckets_settled_late_) +
         " with the error settled a step late";
}

std::shared_ptr<Work> PowerSgdHook::run(ProcessGroup& group, GradBucket& bucket) {
  const bool last = bucket.is_last;
  const int64_t iter = state_.iter;
  if (last) ++state_.iter;
#if VITDDP_WITH_CUDA
  // See Note [PowerSGD beside backward]. Made at the first bucket, compressed or not, with its
  // cuBLASLt workspace: early in the run, not in the middle of the first compressed backward.
  if (bucket.buffer.device().is_cuda() && (!side_ || side_->device != bucket.buffer.device().index)) {
    const int device_index = bucket.buffer.device().index;
    side_ = std::make_shared<SideStream>();
    side_->device = device_index;
    // The communication stream's priority (Note [Stream priorities]).
    side_->stream = cuda::Stream::create(device_index, cuda::communication_priority());
    side_->fork_point = cuda::Event::create();
    cuda::CudaContext::for_device(device_index).workspace(side_->stream.get());
  }
#endif
  if (iter < options_.start_iter) return group.allreduce(bucket.buffer, ReduceOp::kAvg);
  // Compressed from here on. Set at the step's last bucket, which may be one without a matrix
  // (a class token alone) and return early below; the earlier buckets' state is made by then.
  if (last) compressed_since_rebuild_ = true;

  NvtxRange range(nvtx_compress_name(bucket.index), NvtxColor::kCompress);
#if VITDDP_WITH_CUDA
  std::optional<cuda::ForkedStreamScope> beside_backward;
  if (bucket.buffer.device().is_cuda()) beside_backward.emplace(side_->stream.get(), side_->fork_point);
#endif
  PowerSgdWork::Parts parts;
  parts.plan = plan_bucket(bucket, options_);
  parts.bucket = bucket;
  parts.world = group.size();
  const Device device = bucket.buffer.device();
  PowerSgdState::Bucket& st = state_.buckets[bucket.index];
  parts.state = &st;
  // See Note [PowerSGD and skipped steps]: the new state goes to scratch, committed at the end.
  if (!staged_) staged_ = std::make_shared<Staged>();
  staged_->begin(device);
  ++staged_->open;
  if (last) staged_->last_launched = true;
  parts.staged = staged_;
  // See Note [A 16-bit error].
  const DType m_dtype = options_.error_in_bucket_dtype ? bucket.buffer.dtype() : DType::kF32;
  if (options_.error_feedback) {  // M = gradient + error: the buffers here, the pass below
    if (!st.error.defined()) st.error = Tensor::zeros(bucket.buffer.shape(), m_dtype, device);
    if (st.error.dtype() != m_dtype) st.error = st.error.to(m_dtype);  // resumed with the other setting
    // Staged: into scratch; else in place, the error buffer becoming M and then the new error.
    parts.compensated = options_.stage_state ? Tensor::empty(bucket.buffer.shape(), m_dtype, device) : st.error;
  }
  // Note [Uncompressed tensors ride with P]
  // The tensors sent as they are (biases, layer norms, poorly compressible matrices) go in P's
  // all-reduce, after P in the same buffer, each already divided by the world size so that the
  // sum is their average (as NCCL's ncclAvg computes it for floats): two collectives per bucket
  // (P, Q) instead of three, which counts with small buckets on a slow link. A bucket without a
  // compressed matrix averages them in one all-reduce of their own.
  const int64_t u = parts.plan.uncompressed_numel;
  const bool ride_with_p = !parts.plan.matrices.empty();
  if (u > 0) {
    if (ride_with_p) {
      parts.p = factor_buffer(bucket.index, parts.plan.p_numel + u, device);
      parts.flat = slice_of(parts.p, parts.plan.p_numel, {u});
    } else {
      parts.flat = factor_buffer(bucket.index, u, device);
    }
  }
  if (ride_with_p && !parts.p.defined()) parts.p = factor_buffer(bucket.index, parts.plan.p_numel, device);
  // Q: the same random start on every rank, then (warm start) last step's Q. This step works on
  // a copy, committed with the error.
  // A state made for another rank or bucket layout (a checkpoint resumed with other flags); a
  // bucket without a compressed matrix has no P.
  for (const auto& [part, numel, want] :
       {std::tuple{"Q", st.q.defined() && ride_with_p ? st.q.numel() : -1, parts.plan.q_numel},
        std::tuple{"sent P", st.sent_p.defined() ? st.sent_p.numel() : -1, ride_with_p ? parts.plan.p_numel : 0}})
    VITDDP_CHECK(numel < 0 || numel == want, "powersgd: bucket ", bucket.index, "'s ", part, " holds ", numel,
                 " values where rank ", options_.rank, " needs ", want,
                 " (resume with the --powersgd-rank and bucket sizes the checkpoint was saved with)");
  if (ride_with_p) {
    auto initial_q = [&] {
      Tensor q = Tensor::empty({parts.plan.q_numel}, DType::kF32);
      Generator gen(mix64(options_.seed, bucket.index));
      fill_normal(q, gen, 0.0, 1.0);
      return q.to(device);
    };
    if (!st.q.defined()) st.q = initial_q();
    if (options_.warm_start) {
      parts.q = options_.stage_state ? st.q.clone() : st.q;
    } else {
      parts.q = initial_q();
    }
  }
  const int64_t r = options_.rank;
  // See Note [PowerSGD's products as bucket passes]: with error feedback, the compensation and
  // P = M Q in one pass per group, Q = M^T P in one of its own, where the kernels take every group.
  bool passes = options_.bucket_pass_products && options_.error_feedback && ride_with_p;
  for (const LowRankGroup& g : parts.plan.low_rank)
    passes = passes && projection_kernels_take(bucket.buffer, st.error, parts.compensated, parts.p, parts.q, g);
  // See Note [The error settled a step late]: it needs this step's Q to be the last one's. A
  // pending subtraction (a resumed state's too) belongs to this plan's matrices.
  parts.settle_late = passes && options_.warm_start && options_.settle_error_late;
  if (parts.settle_late && !st.sent_p.defined())
    st.sent_p = Tensor::zeros({parts.plan.p_numel}, DType::kF32, device);
  if (st.sent_p.defined()) st.settle_groups = parts.plan.low_rank;
  if (!parts.settle_late && st.sent_p.defined()) {  // one left pending (a checkpoint of a run that settled late)
    settle_error(st);
    st.sent_p = Tensor();  // not kept: nothing is pending from here on
    st.settle_groups.clear();
  }
  if (options_.error_feedback) {
    if (passes)  // the matrices' compensation comes with P below
      add_widened_runs(bucket.buffer, st.error, parts.plan.outside_matrices, parts.compensated);
    else
      add_widened(bucket.buffer, st.error, parts.compensated);
    parts.work = parts.compensated;
  } else {
    parts.work = bucket.buffer.dtype() == m_dtype ? bucket.buffer : bucket.buffer.to(m_dtype);
  }
  if (u > 0) {
    // Riding with P: x / world, summed there; alone: averaged by the all-reduce.
    gather_runs(parts.work, parts.plan.runs, ride_with_p ? 1.0 / group.size() : 1.0, parts.flat);
    if (!ride_with_p) parts.flat_work = group.allreduce(parts.flat, ReduceOp::kAvg);
  }
  if (!ride_with_p) {
    parts.p = Tensor::empty({0}, DType::kF32, device);
    parts.q = parts.p;
    parts.q_work = parts.flat_work;
    parts.flat_work.reset();
    if (!parts.q_work) parts.q_work = group.allreduce(parts.p, ReduceOp::kSum);
    return std::make_shared<PowerSgdWork>(std::move(parts));
  }
  ++buckets_compressed_;
  if (passes) {
    ++buckets_by_passes_;
    if (parts.settle_late) ++buckets_settled_late_;
    for (const LowRankGroup& g : parts.plan.low_rank)  // M = gradient + error and P = M Q
      compensate_and_project(bucket.buffer, st.error, parts.settle_late ? st.sent_p : Tensor(), parts.q, g,
                             parts.compensated, parts.p);
    group.allreduce(parts.p, ReduceOp::kSum)->wait();  // P, and the uncompressed tensors behind it
    orthogonalize(parts.p, parts.plan.p_batch);
    for (const LowRankGroup& g : parts.plan.low_rank)  // Q = M^T P
      project_transposed(parts.work, parts.p, g, parts.q);
    parts.q_work = group.allreduce(parts.q, ReduceOp::kSum);
    return std::make_shared<PowerSgdWork>(std::move(parts));
  }
  // The products through cuBLASLt (or the CPU's), with operands (Note [A 16-bit error]): a
  // 16-bit M with 16-bit copies of the f32 factors on the GPU, the products written in f32; on
  // the CPU, whose products take one dtype, an f32 copy of M.
  const bool narrow_m = parts.work.dtype() != DType::kF32;
  const Tensor m_operand = narrow_m && device.is_cpu() ? parts.work.to(DType::kF32) : parts.work;
  const auto factor_operand = [&](const Tensor& factor, int64_t numel) {
    const Tensor used = slice_of(factor, 0, {numel});
    return m_operand.dtype() == DType::kF32 ? used : used.to(m_operand.dtype());
  };
  parts.q_operand = factor_operand(parts.q, parts.plan.q_numel);
  const Tensor& q_operand = parts.q_operand;
  for (const Plan::Group& g : parts.plan.groups) {  // P = M Q
    const Plan::Matrix& mx = parts.plan.matrices[g.first];
    Tensor m = slice_of(m_operand, bucket.offsets[mx.tensor], {mx.n, mx.m});
    product(m, slice_of(q_operand, mx.q_offset, {mx.m, r}), slice_of(parts.p, mx.p_offset, {mx.n, r}),
            static_cast<int64_t>(g.count), mx.n, mx.m, r, MatmulStrides{g.stride, mx.m * r, mx.n * r});
  }
  group.allreduce(parts.p, ReduceOp::kSum)->wait();  // P, and the uncompressed tensors behind it
  orthogonalize(parts.p, parts.plan.p_batch);
  parts.p_operand = factor_operand(parts.p, parts.plan.p_numel);
  const Tensor& p_operand = parts.p_operand;
  for (const Plan::Group& g : parts.plan.groups) {  // Q = M^T P
    const Plan::Matrix& mx = parts.plan.matrices[g.first];
    Tensor m = slice_of(m_operand, bucket.offsets[mx.tensor], {mx.n, mx.m});
    product_at_b(m, slice_of(q_operand, mx.q_offset, {mx.m, r}), slice_of(p_operand, mx.p_offset, {mx.n, r}),
                 slice_of(parts.q, mx.q_offset, {mx.m, r}), static_cast<int64_t>(g.count), mx.n, mx.m, r,
                 MatmulStrides{g.stride, mx.m * r, mx.n * r});
  }
  parts.q_work = group.allreduce(parts.q, ReduceOp::kSum);
  return std::make_shared<PowerSgdWork>(std::move(parts));
}

// Note [PowerSGD's P buffers]
// P, with the uncompressed tensors behind it (or those alone), is all-reduced from a buffer per
// bucket kept from step to step, not made each step: the process group holds the tensor it
// all-reduces and drops it once the collective is done, on whatever stream is then current, and
// a block freed on one stream while another still reads it (an expansion on a stream of its own,
// as whole-bucket updates beside backward ran it before they were removed: docs/tried.md) could
// be handed to a new tensor mid-read. A buffer that is never freed needs no such ordering (Q
// already is the warm-start state, in place, and M the error buffer: the command line always
// warm-starts and feeds the error back; without either, Q or M would be made each step and this
// would not hold for them). Reuse across steps is ordered: a step's side stream forks from the
// compute stream during its backward, after the compute stream joined the last step's work.
Tensor PowerSgdHook::factor_buffer(size_t bucket, int64_t numel, const Device& device) {
  Tensor& buffer = factor_buffers_[bucket];
  if (!buffer.defined() || buffer.numel() != numel || buffer.device() != device)
    buffer = Tensor::empty({numel}, DType::kF32, device);
  return buffer;
}

void PowerSgdHook::settle_errors() {
  for (auto& [index, bucket] : state_.buckets) settle_error(bucket);
}

Tensor PowerSgdHook::settled_error(size_t index) const {
  PowerSgdState::Bucket copy = state_.buckets.at(index);
  if (!copy.error.defined()) return Tensor();
  copy.error = copy.error.clone();
  if (copy.sent_p.defined()) copy.sent_p = copy.sent_p.clone();
  settle_error(copy);
  return copy.error;
}

std::unique_ptr<CommHook> make_powersgd_hook(const PowerSgdOptions& options) {
  return std::make_unique<PowerSgdHook>(options);
}

}  // namespace vitddp
