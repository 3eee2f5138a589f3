// The 64-bit mixing function of every random stream (splitmix64's finaliser, twice), callable
// from host and device code, so CUDA kernels reproduce the CPU Generator's draws exactly.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define VITDDP_HOST_DEVICE __host__ __device__
#else
#define VITDDP_HOST_DEVICE
#endif

namespace vitddp {

VITDDP_HOST_DEVICE inline uint64_t mix64_inline(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform [0, 1) from one draw, as Generator::uniform().
VITDDP_HOST_DEVICE inline double uniform_from_bits(uint64_t bits) {
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace vitddp
