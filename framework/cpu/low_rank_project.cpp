#include "framework/cpu/low_rank_project.h"

#include <string>

#include "framework/core/scalar_types.h"
#include "framework/cpu/bucket_dispatch.h"

namespace vitddp {

void check_projection(const Tensor& grad, const Tensor& error, const Tensor& m, const Tensor& p, const Tensor& q,
                      const LowRankGroup& g, const char* op, const Tensor& sent_p) {
  for (const Tensor* t : {&grad, &error, &m, &p, &q})
    VITDDP_CHECK(t->defined() && t->is_contiguous() && t->device() == grad.device(), op,
                 ": needs contiguous tensors on one device, got ", t->defined() ? t->description() : "none");
  VITDDP_CHECK(p.dtype() == DType::kF32 && q.dtype() == DType::kF32, op, ": P and Q must be f32, got ",
               p.description(), " and ", q.description());
  for (const Tensor* t : {&error, &m})
    VITDDP_CHECK((t->dtype() == DType::kF32 || t->dtype() == grad.dtype()) && t->numel() == grad.numel(), op,
                 ": ", t->description(), " is not an f32 or ", dtype_name(grad.dtype()), " buffer like ",
                 grad.description());
  VITDDP_CHECK(error.dtype() == m.dtype(), op, ": the error ", error.description(), " and M ", m.description(),
               " differ in dtype");
  VITDDP_CHECK(g.n >= 1 && g.m >= 1 && g.stride >= g.n * g.m && g.offset >= 0 && g.p_offset >= 0 && g.q_offset >= 0,
               op, ": a malformed group");
  check_low_rank_group(p, q, g, grad);
  if (!sent_p.defined()) return;
  VITDDP_CHECK(sent_p.dtype() == DType::kF32 && sent_p.is_contiguous() && sent_p.device() == grad.device() &&
                   g.p_offset + g.count * g.n * g.rank <= sent_p.numel(),
               op, ": the sent P ", sent_p.description(), " does not hold the group's P as ", p.description(), " does");
  check_apart(sent_p, p, false, "the sent P and P overlap", op);
}

namespace cpu {

void compensate_and_project(const Tensor& grad, const Tensor& error, const Tensor& sent_p, const Tensor& q,
                            const LowRankGroup& g, const Tensor& m, const Tensor& p) {
  check_projection(grad, error, m, p, q, g, "compensate_and_project", sent_p);
  VITDDP_CHECK(grad.device().is_cpu(), "compensate_and_project: cpu:: takes CPU tensors");
  dispatch_bucket_and_error(grad.dtype(), m.dtype(), "compensate_and_project", [&](auto zero, auto error_zero) {
    using T = decltype(zero);
    using E = decltype(error_zero);
    const T* gr = grad.data<T>();
    const E* e = error.data<E>();
    E* mo = m.data<E>();
    for (int64_t k = 0; k < g.count; ++k) {
      const float* qk = q.data<float>() + g.q_offset + k * g.m * g.rank;
      float* pk = p.data<float>() + g.p_offset + k * g.n * g.rank;
      const float* sk = sent_p.defined() ? sent_p.data<float>() + g.p_offset + k * g.n * g.rank : nullptr;
      for (int64_t i = 0; i < g.n; ++i) {
        float* row = pk + i * g.rank;
        for (int64_t t = 0; t < g.rank; ++t) row[t] = 0.0f;
        const int64_t base = g.offset + k * g.stride + i * g.m;
        for (int64_t j = 0; j < g.m; ++j) {
          float sent = 0.0f;  // t ascending, as the expansion sums it
          if (sk)
            for (int64_t t = 0; t < g.rank; ++t) sent += sk[i * g.rank + t] * qk[j * g.rank + t];
          const E stored = static_cast<E>(static_cast<float>(gr[base + j]) + static_cast<float>(e[base + j]) - sent);
          mo[base + j] = stored;
          const float v = static_cast<float>(stored);
          for (int64_t t = 0; t < g.rank; ++t) row[t] += v * qk[j * g.rank + t];
        }
      }
    }
  });
}

void project_transposed(const Tensor& m, const Tensor& p, const LowRankGroup& g, const Tensor& q) {
  check_projection(m, m, m, p, q, g, "project_transposed");
  VITDDP_CHECK(m.device().is_cpu(), "project_transposed: cpu:: takes CPU tensors");
  dispatch_bucket_dtype(m.dtype(), "project_transposed", [&](auto zero) {
    using E = decltype(zero);
    const E* mi = m.data<E>();
    for (int64_t k = 0; k < g.count; ++k) {
      const float* pk = p.data<float>() + g.p_offset + k * g.n * g.rank;
      float* qk = q.data<float>() + g.q_offset + k * g.m * g.rank;
      for (int64_t j = 0; j < g.m * g.rank; ++j) qk[j] = 0.0f;
      for (int64_t i = 0; i < g.n; ++i) {  // rows in order: the sum over i runs ascending
        const E* row = mi + g.offset + k * g.stride + i * g.m;
        for (int64_t j = 0; j < g.m; ++j) {
          const float v = static_cast<float>(row[j]);
          for (int64_t t = 0; t < g.rank; ++t) qk[j * g.rank + t] += v * pk[i * g.rank + t];
        }
      }
    }
  });
}

}  // namespace cpu
}  // namespace vitddp
