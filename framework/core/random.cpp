#include "framework/core/random.h"

#include <cmath>

#include "framework/core/mix64.h"
#include "framework/core/scalar_types.h"

namespace vitddp {

uint64_t mix64(uint64_t a, uint64_t b) { return mix64_inline(a, b); }

double Generator::uniform() { return uniform_from_bits(next_u64()); }

double Generator::normal() {
  double u1 = uniform();
  double u2 = uniform();
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

namespace {
template <typename Draw>
void fill_with(Tensor& t, const char* op, Draw&& draw) {
  check_tensor(t.device().is_cpu() && is_floating(t.dtype()), op, "a floating CPU tensor", t);
  Tensor c = t.is_contiguous() ? t : Tensor::empty(t.shape(), t.dtype());
  dispatch_dtype(c.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* out = c.data<T>();
    for (int64_t i = 0; i < c.numel(); ++i) out[i] = static_cast<T>(draw());
  });
  if (!c.same_impl(t)) t.copy_(c);
}
}  // namespace

void fill_uniform(Tensor& t, Generator& gen, double low, double high) {
  fill_with(t, "fill_uniform", [&] { return low + (high - low) * gen.uniform(); });
}

void fill_normal(Tensor& t, Generator& gen, double mean, double std) {
  fill_with(t, "fill_normal", [&] { return mean + std * gen.normal(); });
}

void fill_trunc_normal(Tensor& t, Generator& gen, double mean, double std, double low, double high) {
  VITDDP_CHECK(low < high, "fill_trunc_normal: empty interval");
  fill_with(t, "fill_trunc_normal", [&] {
    for (;;) {
      double v = mean + std * gen.normal();
      if (v >= low && v <= high) return v;
    }
  });
}

}  // namespace vitddp
