// Output tensors for kernel tests: a device tensor of `shape` followed by guard elements of a
// known value, so a kernel that writes past its output is caught; with VITDDP_POISON_ALLOC=1 set
// before the first allocation the output itself starts as NaN bytes, so one it leaves unwritten
// is caught too.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "framework/core/tensor.h"

namespace vitddp::testing {

constexpr double kGuardValue = 7.0;

struct Guarded {
  Tensor all;    // (numel + guard elements)
  Tensor view;   // `shape`, contiguous, over the front of `all`
  Tensor guard;  // the guard elements, each kGuardValue
};

Guarded guarded(const Shape& shape, DType dtype, int64_t guard_elements);
// Fails naming the first guard element that changed.
::testing::AssertionResult guard_intact(const std::string& what, const Guarded& g);

}  // namespace vitddp::testing
