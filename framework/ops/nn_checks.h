// Argument checks shared by the nn ops (linear, matmul, layer_norm, softmax, attention,
// patch_embed, cross_entropy). Every message starts with the op name and names the shapes.
#pragma once

#include <string>

#include "framework/core/shape.h"
#include "framework/core/tensor.h"

namespace vitddp::nn_checks {

// "f32[2, 5]": dtype and shape, without the device.
inline std::string brief(const Tensor& t) {
  if (!t.defined()) return "undefined tensor";
  return std::string(dtype_name(t.dtype())) + shape_str(t.shape());
}

inline void check_defined(const char* op, const char* name, const Tensor& t) {
  VITDDP_CHECK(t.defined(), op, ": ", name, " is an undefined tensor");
}

// `t` is defined and floating.
inline void check_floating(const char* op, const char* name, const Tensor& t) {
  check_defined(op, name, t);
  VITDDP_CHECK(is_floating(t.dtype()), op, ": ", name, " must be a floating tensor, got ", t.description());
}

// `t` has the dtype and device of `ref`.
inline void check_like(const char* op, const char* name, const Tensor& t, const char* ref_name,
                       const Tensor& ref) {
  VITDDP_CHECK(t.dtype() == ref.dtype(), op, ": ", name, " ", t.description(), " has a different dtype from ",
               ref_name, " ", ref.description());
  VITDDP_CHECK(t.device() == ref.device(), op, ": ", name, " ", t.description(), " is on a different device from ",
               ref_name, " ", ref.description());
}

// Product of all dims but the last (1 for a 1-D tensor).
inline int64_t leading_rows(const Tensor& t) {
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) rows *= t.shape()[d];
  return rows;
}

}  // namespace vitddp::nn_checks
