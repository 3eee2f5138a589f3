// For the fused attention kernels' tests: a case of the ViT family (dtype, batch, tokens, heads,
// head dim, tolerance), the CPU's composed attention through autograd as the reference, the
// comparison of one output's columns against it, and the whole check of a kernel pair.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "framework/core/tensor.h"

namespace vitddp::testing {

struct AttentionCase {
  DType dtype;
  int64_t batch, seq_len, heads, head_dim;
  double tol;  // max |error| / max |reference|
};

// "bf16_B3_N197_H3_d64": the case's name in test names and messages.
std::string case_name(const AttentionCase& c);
void PrintTo(const AttentionCase& c, std::ostream* os);

// got against want, both (B, N, cols) flat, over columns [c0, c1): max |got - want| over
// max |want| below tol, every element finite; prints the ratio.
::testing::AssertionResult close_columns(const std::string& what, const std::vector<double>& got,
                                         const std::vector<double>& want, int64_t cols, int64_t c0, int64_t c1,
                                         double tol);

// The CPU's composed attention in f32 through autograd: out (B, N, D) and dqkv (B, N, 3D).
std::pair<std::vector<double>, std::vector<double>> cpu_attention_reference(const Tensor& qkv32, const Tensor& dout32,
                                                                            int64_t heads);

// A fused attention's entry points on the packed layouts: forward writes out (B, N, D) and, when
// lse is defined, the log-sum-exp (B, H, N); backward writes dqkv (B, N, 3D).
struct FusedAttention {
  std::function<void(const Tensor& qkv, int64_t heads, const Tensor& out, const Tensor& lse)> forward;
  std::function<void(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout, int64_t heads,
                     const Tensor& dqkv)>
      backward;
};

// Case c on random inputs of a trained layer's scale (rounded to c.dtype, on which the CPU works
// too) through `kernels` on GPU 0, with outputs followed by guard elements (and NaN-poisoned when
// the test set VITDDP_POISON_ALLOC=1 before its first allocation): O, dQ, dK and dV against the
// CPU within c.tol, the guards intact, the forward without lse bit-equal to training's, and a
// second backward bit-equal to the first.
void check_fused_attention(const AttentionCase& c, const FusedAttention& kernels, uint64_t seed);

// A shape multi_head_attention is given, and the name of the backward node it must record
// (which path it took: Note [Which attention runs]).
struct DispatchCase {
  int64_t seq_len, heads, head_dim;
  const char* backward_node;
};

// For each case, multi_head_attention on GPU 0 in `dtype` (batch 2): the path's node name, and
// its output and autograd gradient against the CPU within tol.
void check_attention_dispatch(DType dtype, const std::vector<DispatchCase>& cases, double tol, uint64_t seed);

}  // namespace vitddp::testing
