#include "framework/cpu/dropout.h"

#include "framework/core/scalar_types.h"

namespace vitddp::cpu {

void dropout_mask(const Tensor& mask, double p, Generator& gen) {
  dispatch_float(mask.dtype(), "dropout", [&](auto zero) {
    using T = decltype(zero);
    T* out = mask.data<T>();
    const T keep = static_cast<T>(1.0 / (1.0 - p));
    const int64_t n = mask.numel();
    for (int64_t i = 0; i < n; ++i) out[i] = gen.uniform() < p ? T(0) : keep;
  });
}

}  // namespace vitddp::cpu
