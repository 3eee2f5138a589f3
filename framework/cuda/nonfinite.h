// Finite-ness on the device: the first non-finite gradient (NonfiniteCheck), and the small
// kernels with which the comm hooks keep non-finite data out of their state and report what
// their compression could not represent, all without the host reading anything.
#pragma once

#include <cstdint>

#include "framework/core/tensor.h"

namespace vitddp::cuda {

// flag (1) i64 := smallest index i with grads[i] NaN or Inf, else INT64_MAX. Two launches.
void first_nonfinite(const Tensor& grads, const Tensor& flag);

// flag (1) i64 := 1 when any element of x (f32, contiguous) is NaN or Inf; left as it is
// otherwise, so several calls accumulate.
void mark_nonfinite(const Tensor& x, const Tensor& flag);

// dst := src (f32, bf16 or f16, one dtype, contiguous, same numel) when flag[0] == 0; nothing otherwise. The kernel
// reads the flag, the host does not.
void copy_unless_flagged(const Tensor& dst, const Tensor& src, const Tensor& flag);

// dst := cast(src * scale) from f32 to dst's dtype (f16 or bf16), both contiguous, with every
// non-finite value (NaN or Inf) written as NaN: after a sum, Inf then means an overflow.
void scale_cast_nonfinite_as_nan(const Tensor& src, double scale, const Tensor& dst);

// dst := src from f16/bf16 to f32, both contiguous; where a value is +-Inf, record[slot] :=
// value (record is i64 on the device).
void widen_recording_inf(const Tensor& src, const Tensor& dst, const Tensor& record, int64_t slot, int64_t value);

}  // namespace vitddp::cuda
