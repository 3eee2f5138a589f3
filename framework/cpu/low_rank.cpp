#include "framework/cpu/low_rank.h"

#include <cmath>
#include <string>

#include "framework/core/scalar_types.h"
#include "framework/cpu/bucket_dispatch.h"

namespace vitddp {

int64_t BucketRuns::total() const {
  int64_t sum = 0;
  for (int64_t n : numels) sum += n;
  return sum;
}

void check_runs_inside(const BucketRuns& runs, const Tensor& bucket, const char* op) {
  VITDDP_CHECK(runs.offsets.size() == runs.numels.size(), op, ": ", runs.offsets.size(), " run offsets but ",
               runs.numels.size(), " lengths");
  for (size_t i = 0; i < runs.offsets.size(); ++i)
    VITDDP_CHECK(runs.offsets[i] >= 0 && runs.numels[i] >= 0 && runs.offsets[i] + runs.numels[i] <= bucket.numel(),
                 op, ": run ", i, " [", runs.offsets[i], ", +", runs.numels[i], ") outside ", bucket.description());
}

void check_bucket_runs(const BucketRuns& runs, const Tensor& bucket, const Tensor& flat, const char* op,
                       const Tensor& residual) {
  if (residual.defined())
    VITDDP_CHECK(residual.numel() == bucket.numel(), op, ": ", residual.description(), " vs ", bucket.description());
  check_runs_inside(runs, bucket, op);
  VITDDP_CHECK(flat.numel() == runs.total(), op, ": ", flat.description(), " for runs of ", runs.total(),
               " elements");
}

void check_low_rank_group(const Tensor& p, const Tensor& q, const LowRankGroup& g, const Tensor& out) {
  const int64_t last = g.offset + (g.count - 1) * g.stride + g.n * g.m;
  VITDDP_CHECK(g.count >= 1 && g.rank >= 1 && last <= out.numel() && g.p_offset + g.count * g.n * g.rank <= p.numel() &&
                   g.q_offset + g.count * g.m * g.rank <= q.numel(),
               "expand_low_rank: a group outside its buffers");
}

void check_apart(const Tensor& a, const Tensor& b, bool same_ok, const char* what, const char* op) {
  const auto* x = static_cast<const char*>(a.data_ptr());
  const auto* y = static_cast<const char*>(b.data_ptr());
  const int64_t x_bytes = a.numel() * dtype_size(a.dtype()), y_bytes = b.numel() * dtype_size(b.dtype());
  const bool same = x == y && x_bytes == y_bytes;
  VITDDP_CHECK((same_ok && same) || x + x_bytes <= y || y + y_bytes <= x, op, ": ", what);
}

namespace cpu {
namespace {

void check_f32(const Tensor& t, const char* op) {
  check_tensor(t.dtype() == DType::kF32 && t.is_contiguous() && t.device().is_cpu(), op, "a contiguous f32 CPU tensor",
               t);
}

// An error-feedback buffer (or M) beside a bucket of `bucket` dtype: f32, or the bucket's own.
void check_error_buffer(const Tensor& t, DType bucket, const char* op) {
  check_tensor((t.dtype() == DType::kF32 || t.dtype() == bucket) && t.is_contiguous() && t.device().is_cpu(), op,
               (std::string("a contiguous f32 or ") + dtype_name(bucket) + " CPU tensor").c_str(), t);
}

// out := grad + error over [begin, end) of each run (the whole bucket: one run).
void add_widened_over(const Tensor& grad, const Tensor& error, const Tensor& out, const BucketRuns& runs,
                      const char* op) {
  check_tensor(grad.is_contiguous() && grad.numel() == out.numel(), op, "a contiguous gradient like out", grad);
  check_error_buffer(error, grad.dtype(), op);
  check_error_buffer(out, grad.dtype(), op);
  VITDDP_CHECK(error.numel() == out.numel() && error.dtype() == out.dtype(), op, ": ", error.description(), " vs ",
               out.description());
  check_runs_inside(runs, grad, op);
  dispatch_bucket_and_error(grad.dtype(), out.dtype(), op, [&](auto zero, auto error_zero) {
    using T = decltype(zero);
    using E = decltype(error_zero);
    const T* g = grad.data<T>();
    const E* e = error.data<E>();
    E* o = out.data<E>();
    for (size_t r = 0; r < runs.offsets.size(); ++r)
      for (int64_t i = runs.offsets[r]; i < runs.offsets[r] + runs.numels[r]; ++i)
        o[i] = static_cast<E>(static_cast<float>(g[i]) + static_cast<float>(e[i]));
  });
}

}  // namespace

void add_widened(const Tensor& grad, const Tensor& error, const Tensor& out) {
  BucketRuns whole;
  whole.offsets = {0};
  whole.numels = {out.numel()};
  add_widened_over(grad, error, out, whole, "add_widened");
}

void add_widened_runs(const Tensor& grad, const Tensor& error, const BucketRuns& runs, const Tensor& out) {
  add_widened_over(grad, error, out, runs, "add_widened_runs");
}

void expand_low_rank(const Tensor& p, const Tensor& q, const LowRankGroup& g, const Tensor& out,
                     const Tensor& residual, const Tensor& flag) {
  check_f32(p, "expand_low_rank");
  check_f32(q, "expand_low_rank");
  check_tensor(out.is_contiguous(), "expand_low_rank", "a contiguous bucket", out);
  check_low_rank_group(p, q, g, out);
  if (residual.defined()) {
    check_error_buffer(residual, out.dtype(), "expand_low_rank");
    VITDDP_CHECK(residual.numel() == out.numel(), "expand_low_rank: ", residual.description(), " vs ",
                 out.description());
  }
  const float* pb = p.data<float>();
  const float* qb = q.data<float>();
  bool bad = false;
  const DType residual_dtype = residual.defined() ? residual.dtype() : DType::kF32;
  dispatch_bucket_and_error(out.dtype(), residual_dtype, "expand_low_rank", [&](auto zero, auto residual_zero) {
    using T = decltype(zero);
    using R = decltype(residual_zero);
    T* o = out.data<T>();
    R* res = residual.defined() ? residual.data<R>() : nullptr;
    for (int64_t k = 0; k < g.count; ++k) {
      const float* pk = pb + g.p_offset + k * g.n * g.rank;
      const float* qk = qb + g.q_offset + k * g.m * g.rank;
      const int64_t base = g.offset + k * g.stride;
      for (int64_t i = 0; i < g.n; ++i)
        for (int64_t j = 0; j < g.m; ++j) {
          float approx = 0.0f;
          for (int64_t t = 0; t < g.rank; ++t) approx += pk[i * g.rank + t] * qk[j * g.rank + t];
          const int64_t at = base + i * g.m + j;
          o[at] = static_cast<T>(approx);
          if (res) {
            res[at] = static_cast<R>(static_cast<float>(res[at]) - approx);
            bad |= !std::isfinite(static_cast<float>(res[at]));
          }
        }
    }
  });
  if (bad) flag.data<int64_t>()[0] = 1;
}

void gather_runs(const Tensor& src, const BucketRuns& runs, double scale, const Tensor& flat) {
  check_tensor(src.is_contiguous(), "gather_runs", "a contiguous tensor", src);
  check_f32(flat, "gather_runs");
  check_bucket_runs(runs, src, flat, "gather_runs");
  dispatch_bucket_dtype(src.dtype(), "gather_runs", [&](auto zero) {
    using S = decltype(zero);
    const S* s = src.data<S>();
    float* f = flat.data<float>();
    const float k = static_cast<float>(scale);
    for (size_t r = 0; r < runs.offsets.size(); ++r)
      for (int64_t i = 0; i < runs.numels[r]; ++i) *f++ = k * static_cast<float>(s[runs.offsets[r] + i]);
  });
}

void scatter_runs(const Tensor& flat, const BucketRuns& runs, const Tensor& bucket, const Tensor& residual,
                  const Tensor& flag) {
  check_f32(flat, "scatter_runs");
  check_tensor(bucket.is_contiguous(), "scatter_runs", "a contiguous bucket", bucket);
  check_bucket_runs(runs, bucket, flat, "scatter_runs", residual);
  if (residual.defined()) check_error_buffer(residual, bucket.dtype(), "scatter_runs");
  bool bad = false;
  const DType residual_dtype = residual.defined() ? residual.dtype() : DType::kF32;
  dispatch_bucket_and_error(bucket.dtype(), residual_dtype, "scatter_runs", [&](auto zero, auto residual_zero) {
    using T = decltype(zero);
    using R = decltype(residual_zero);
    T* b = bucket.data<T>();
    R* res = residual.defined() ? residual.data<R>() : nullptr;
    const float* f = flat.data<float>();
    for (size_t r = 0; r < runs.offsets.size(); ++r)
      for (int64_t i = 0; i < runs.numels[r]; ++i, ++f) {
        const int64_t at = runs.offsets[r] + i;
        b[at] = static_cast<T>(*f);
        if (res) {
          res[at] = static_cast<R>(static_cast<float>(res[at]) - *f);
          bad |= !std::isfinite(static_cast<float>(res[at]));
        }
      }
  });
  if (bad) flag.data<int64_t>()[0] = 1;
}

}  // namespace cpu
}  // namespace vitddp
