#include "framework/optim/nonfinite.h"

#include <cmath>

#include "framework/core/scalar_types.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/nonfinite.h"
#endif

namespace vitddp {

NonfiniteCheck::NonfiniteCheck(const ParamArena& arena)
    : arena_(arena), flag_(Tensor::full({1}, 0.0, DType::kI64, arena.device())) {}

void NonfiniteCheck::run() {
  const Tensor grads = arena_.flat_grads();
  if (grads.device().is_cuda()) {
#if VITDDP_WITH_CUDA
    cuda::first_nonfinite(grads, flag_);
    return;
#endif
  }
  int64_t first = kNoNonfinite;
  dispatch_float(grads.dtype(), "nonfinite check", [&](auto zero) {
    using T = decltype(zero);
    first = first_nonfinite_index(grads.data<T>(), grads.numel());
  });
  flag_.data<int64_t>()[0] = first;
}

std::string NonfiniteCheck::parameter_at(int64_t index) const {
  // Offsets grow as the registration index falls (Note [Arena layout]).
  std::string name = "?";
  int64_t best = -1;
  for (size_t i = 0; i < arena_.size(); ++i) {
    const int64_t offset = arena_.offset_of(i);
    if (offset <= index && offset > best) {
      best = offset;
      name = arena_.named_params()[i].first;
    }
  }
  return name;
}

}  // namespace vitddp
