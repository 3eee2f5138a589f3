// A counter-based random generator: the state is (seed, counter), so it is cheap to save in
// checkpoints, to split into independent streams and to reproduce anywhere.
#pragma once

#include <cstdint>

#include "framework/core/tensor.h"

namespace vitddp {

// A 64-bit mix of (a, b) (splitmix64 finaliser); the building block of every random stream.
uint64_t mix64(uint64_t a, uint64_t b);

class Generator {
 public:
  explicit Generator(uint64_t seed = 0, uint64_t counter = 0) : seed_(seed), counter_(counter) {}
  uint64_t next_u64() { return mix64(seed_, counter_++); }
  double uniform();  // [0, 1)
  double normal();   // N(0, 1), Box-Muller on two uniforms
  uint64_t seed() const { return seed_; }
  uint64_t counter() const { return counter_; }
  // Skips `n` draws (a CUDA kernel made them from (seed, counter + i)).
  void advance(uint64_t n) { counter_ += n; }

 private:
  uint64_t seed_;
  uint64_t counter_;
};

// In-place initialisers on CPU tensors of any floating dtype (values drawn in f64 order).
void fill_uniform(Tensor& t, Generator& gen, double low, double high);
void fill_normal(Tensor& t, Generator& gen, double mean, double std);
// Normal(mean, std) redrawn until inside [low, high], like torch.nn.init.trunc_normal_.
void fill_trunc_normal(Tensor& t, Generator& gen, double mean, double std, double low, double high);

}  // namespace vitddp
