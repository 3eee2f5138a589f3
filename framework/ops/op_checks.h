// Input checks shared by the ops: every message names the op and the offending tensors.
#pragma once

#include <string>

#include "framework/core/tensor.h"

namespace vitddp {

inline void check_defined(const Tensor& t, const char* op) {
  VITDDP_CHECK(t.defined(), op, ": expected a defined tensor, got an undefined one");
}

// Both defined, on the same device, with the same dtype.
inline void check_same_device_dtype(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op);
  check_defined(b, op);
  VITDDP_CHECK(a.device() == b.device(), op, ": inputs are on different devices: ", a.description(), " and ",
               b.description());
  VITDDP_CHECK(a.dtype() == b.dtype(), op, ": inputs have different dtypes: ", a.description(), " and ",
               b.description());
}

inline void check_floating(const Tensor& t, const char* op) {
  check_defined(t, op);
  check_tensor(is_floating(t.dtype()), op, "a floating tensor", t);
}

}  // namespace vitddp
