// NonfiniteCheck: finds the first NaN or Inf among the arena's gradients after backward, and
// leaves the answer in a one-element i64 tensor on the training device (kNoNonfinite when all
// are finite). Optimizers given this flag skip their update when it is set, on the device, so
// a bad step never reaches the weights and the host learns of it without waiting inside the
// step. Gradients are identical on every rank after the all-reduce, so every rank decides the
// same.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "framework/nn/param_arena.h"

namespace vitddp {

constexpr int64_t kNoNonfinite = std::numeric_limits<int64_t>::max();

// The CPU's scan: the index of the first NaN or Inf among `n` values, or kNoNonfinite.
template <typename T>
int64_t first_nonfinite_index(const T* values, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(values[i])) return i;
  return kNoNonfinite;
}

class NonfiniteCheck {
 public:
  explicit NonfiniteCheck(const ParamArena& arena);
  // Enqueues the check of the current gradients (on the current stream on a GPU).
  void run();
  Tensor flag() const { return flag_; }  // (1) i64 on the arena's device
  // The parameter holding flat gradient element `index`, for messages.
  std::string parameter_at(int64_t index) const;

 private:
  const ParamArena& arena_;
  Tensor flag_;
};

}  // namespace vitddp
