#include "distributed/hooks/powersgd.h"

#include "framework/core/nvtx.h"
#include "framework/core/random.h"
#include "framework/core/tensor_math.h"
#include "framework/cpu/linear.h"
#include "framework/cpu/orthogonalize.h"
#include "framework/cuda/linear.h"

namespace vitddp {
namespace {

// Row-major products on slices, without autograd: c = a b, db = a^T dc, da = dc b^T.
void product(const Tensor& a, const Tensor& b, const Tensor& c, int64_t m, int64_t k, int64_t n) {
  if (a.device().is_cpu()) return cpu::matmul_forward(a, b, c, 1, m, k, n, false);
#if VITDDP_WITH_CUDA
  cuda::matmul_forward(a, b, c, 1, m, k, n, false);
#endif
}
void product_at_b(const Tensor& a, const Tensor& b_shape, const Tensor& dc, const Tensor& db, int64_t m, int64_t k,
                  int64_t n) {
  if (a.device().is_cpu()) return cpu::matmul_backward(a, b_shape, dc, Tensor(), db, 1, m, k, n, false);
#if VITDDP_WITH_CUDA
  cuda::matmul_backward(a, b_shape, dc, Tensor(), db, 1, m, k, n, false);
#endif
}
void product_a_bt(const Tensor& a_shape, const Tensor& b, const Tensor& dc, const Tensor& da, int64_t m, int64_t k,
                  int64_t n) {
  if (b.device().is_cpu()) return cpu::matmul_backward(a_shape, b, dc, da, Tensor(), 1, m, k, n, false);
#if VITDDP_WITH_CUDA
  cuda::matmul_backward(a_shape, b, dc, da, Tensor(), 1, m, k, n, false);
#endif
}

void orthogonalize(const Tensor& flat, const MatrixBatch& batch) {
  if (flat.device().is_cpu()) return cpu::orthogonalize_columns(flat, batch);
#if VITDDP_WITH_CUDA
  cuda::orthogonalize_columns(flat, batch);
#endif
}

Tensor slice_of(const Tensor& flat, int64_t offset, const Shape& shape) {
  return flat.as_strided(shape, contiguous_strides(shape), flat.storage_offset() + offset);
}

// How one bucket splits into compressed matrices and uncompressed tensors.
struct Plan {
  struct Matrix {
    size_t tensor;            // index into the bucket's tensors
    int64_t n, m;             // rows, columns
    int64_t p_offset, q_offset;
  };
  std::vector<Matrix> matrices;
  std::vector<size_t> uncompressed;
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
    plan.matrices.push_back({t, n, m, plan.p_numel, plan.q_numel});
    plan.p_batch.offsets.push_back(plan.p_numel);
    plan.p_batch.rows.push_back(n);
    plan.p_numel += n * o.rank;
    plan.q_numel += m * o.rank;
  }
  return plan;
}

// Finishes a compressed bucket once the Q all-reduce (and the uncompressed one) are done.
class PowerSgdWork final : public Work {
 public:
  struct Parts {
    std::shared_ptr<Work> q_work, flat_work;
    Plan plan;
    GradBucket bucket;
    Tensor work;          // f32 working copy of the bucket (the bucket itself when f32)
    Tensor compensated;   // the bucket before compression (error feedback input), or undefined
    Tensor p, q, flat;
    PowerSgdState::Bucket* state = nullptr;
    int world = 1;
    int64_t rank = 1;
  };
  explicit PowerSgdWork(Parts parts) : p_(std::move(parts)) {}
  void wait() override {
    if (finished_) return;
    p_.q_work->wait();
    if (p_.flat_work) p_.flat_work->wait();
    NvtxRange range(nvtx_decompress_name(p_.bucket.index), NvtxColor::kCompress);
    // Q holds the sum over ranks: M ~ P (Q / world)^T.
    add_inplace(p_.q, p_.q, 1.0 / p_.world - 1.0);
    for (const Plan::Matrix& mx : p_.plan.matrices) {
      Tensor m = slice_of(p_.work, p_.bucket.offsets[mx.tensor], {mx.n, mx.m});
      Tensor pk = slice_of(p_.p, mx.p_offset, {mx.n, p_.rank});
      Tensor qk = slice_of(p_.q, mx.q_offset, {mx.m, p_.rank});
      product_a_bt(m, qk, pk, m, mx.n, mx.m, p_.rank);
    }
    int64_t at = 0;
    for (size_t t : p_.plan.uncompressed) {
      const int64_t numel = shape_numel(p_.bucket.shapes[t]);
      slice_of(p_.work, p_.bucket.offsets[t], {numel}).copy_(slice_of(p_.flat, at, {numel}));
      at += numel;
    }
    if (p_.compensated.defined()) {
      // What was not sent: the compensated local gradient minus the (average) approximation.
      p_.state->error.copy_(p_.compensated);
      add_inplace(p_.state->error, p_.work, -1.0);
    }
    if (!p_.work.same_impl(p_.bucket.buffer)) p_.bucket.buffer.copy_(p_.work);
    finished_ = true;
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

std::shared_ptr<Work> PowerSgdHook::run(ProcessGroup& group, GradBucket& bucket) {
  const bool last = bucket.is_last;
  const int64_t iter = state_.iter;
  if (last) ++state_.iter;
  if (iter < options_.start_iter) return group.allreduce(bucket.buffer, ReduceOp::kAvg);

  NvtxRange range(nvtx_compress_name(bucket.index), NvtxColor::kCompress);
  PowerSgdWork::Parts parts;
  parts.plan = plan_bucket(bucket, options_);
  parts.bucket = bucket;
  parts.world = group.size();
  parts.rank = options_.rank;
  const Device device = bucket.buffer.device();
  parts.work = bucket.buffer.dtype() == DType::kF32 ? bucket.buffer : bucket.buffer.to(DType::kF32);
  PowerSgdState::Bucket& st = state_.buckets[bucket.index];
  parts.state = &st;
  if (options_.error_feedback) {
    if (!st.error.defined()) st.error = Tensor::zeros(parts.work.shape(), DType::kF32, device);
    add_inplace(parts.work, st.error);
    parts.compensated = parts.work.clone();
  }
  // Uncompressed tensors: one flat averaging all-reduce.
  if (parts.plan.uncompressed_numel > 0) {
    parts.flat = Tensor::empty({parts.plan.uncompressed_numel}, DType::kF32, device);
    int64_t at = 0;
    for (size_t t : parts.plan.uncompressed) {
      const int64_t numel = shape_numel(bucket.shapes[t]);
      slice_of(parts.flat, at, {numel}).copy_(slice_of(parts.work, bucket.offsets[t], {numel}));
      at += numel;
    }
    parts.flat_work = group.allreduce(parts.flat, ReduceOp::kAvg);
  }
  if (parts.plan.matrices.empty()) {
    parts.p = Tensor::empty({0}, DType::kF32, device);
    parts.q = parts.p;
    parts.q_work = parts.flat_work;
    parts.flat_work.reset();
    if (!parts.q_work) parts.q_work = group.allreduce(parts.p, ReduceOp::kSum);
    return std::make_shared<PowerSgdWork>(std::move(parts));
  }
  // Q: the same random start on every rank, then (warm start) last step's Q.
  if (!st.q.defined() || !options_.warm_start) {
    Tensor q = Tensor::empty({parts.plan.q_numel}, DType::kF32);
    Generator gen(mix64(options_.seed, bucket.index));
    fill_normal(q, gen, 0.0, 1.0);
    st.q = q.to(device);
  }
  parts.q = st.q;
  parts.p = Tensor::empty({parts.plan.p_numel}, DType::kF32, device);
  const int64_t r = options_.rank;
  for (const Plan::Matrix& mx : parts.plan.matrices) {
    Tensor m = slice_of(parts.work, bucket.offsets[mx.tensor], {mx.n, mx.m});
    product(m, slice_of(parts.q, mx.q_offset, {mx.m, r}), slice_of(parts.p, mx.p_offset, {mx.n, r}), mx.n, mx.m, r);
  }
  group.allreduce(parts.p, ReduceOp::kSum)->wait();
  orthogonalize(parts.p, parts.plan.p_batch);
  for (const Plan::Matrix& mx : parts.plan.matrices) {
    Tensor m = slice_of(parts.work, bucket.offsets[mx.tensor], {mx.n, mx.m});
    product_at_b(m, slice_of(parts.q, mx.q_offset, {mx.m, r}), slice_of(parts.p, mx.p_offset, {mx.n, r}),
                 slice_of(parts.q, mx.q_offset, {mx.m, r}), mx.n, mx.m, r);
  }
  parts.q_work = group.allreduce(parts.q, ReduceOp::kSum);
  return std::make_shared<PowerSgdWork>(std::move(parts));
}

std::unique_ptr<CommHook> make_powersgd_hook(const PowerSgdOptions& options) {
  return std::make_unique<PowerSgdHook>(options);
}

}  // namespace vitddp
