// Element strides between the batch entries of a batched row-major matrix product's operands:
// a (M, K), b (K, N), c (M, N); a gradient has its operand's stride. 0 means back to back
// (M*K, K*N, M*N). Lets one launch multiply matrices that sit at a fixed distance in a larger
// buffer (PowerSGD's same-shape gradients, one layer apart in the arena).
#pragma once

#include <cstdint>

namespace vitddp {

struct MatmulStrides {
  int64_t a = 0, b = 0, c = 0;
  int64_t a_or(int64_t dense) const { return a > 0 ? a : dense; }
  int64_t b_or(int64_t dense) const { return b > 0 ? b : dense; }
  int64_t c_or(int64_t dense) const { return c > 0 ? c : dense; }
};

}  // namespace vitddp
