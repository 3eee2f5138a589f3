// Small helpers for the nn-op tests: non-contiguous copies and index arithmetic.
#pragma once

#include <utility>

#include "framework/core/tensor.h"

namespace vitddp::testing {

// A non-contiguous tensor equal to `t`: its storage has dims d0 and d1 swapped, and the view
// swaps them back through the strides.
inline Tensor noncontiguous_copy(const Tensor& t, int64_t d0 = 0, int64_t d1 = -1) {
  if (d1 < 0) d1 += t.dim();
  Shape storage_shape = t.shape();
  std::swap(storage_shape[d0], storage_shape[d1]);
  Tensor base = Tensor::empty(storage_shape, t.dtype(), t.device());
  Shape strides = base.strides();
  std::swap(strides[d0], strides[d1]);
  Tensor view = base.as_strided(t.shape(), strides, 0);
  view.copy_(t);
  return view;
}

}  // namespace vitddp::testing
