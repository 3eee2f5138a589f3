// Shared test helpers: random tensors, closeness checks and the f64 finite-difference
// gradient check every op is tested with.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "framework/core/random.h"
#include "framework/core/tensor.h"

namespace vitddp::testing {

// Uniform in [low, high) on the CPU; fresh values per call of `gen`. Never zeros.
Tensor random_tensor(const Shape& shape, Generator& gen, DType dtype = DType::kF64, double low = -1.0,
                     double high = 1.0);
// ||a - b|| / max(||b||, tiny), over all elements (any device, any dtype).
double relative_error(const Tensor& a, const Tensor& b);
// Max |a - b| over all elements.
double max_abs_diff(const Tensor& a, const Tensor& b);

using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks the backward of `fn` at `inputs` (f64 CPU tensors) against central finite differences:
// for a random weighting w of the output, d<fn(x), w>/dx from backward() must match
// (<fn(x + eps e_i), w> - <fn(x - eps e_i), w>) / 2 eps for every element of every input that
// requires grad. Reports the first mismatch with the input and element index.
::testing::AssertionResult gradcheck(const TensorFn& fn, const std::vector<Tensor>& inputs, double eps = 1e-6,
                                     double atol = 1e-6, double rtol = 1e-5);

// Runs `body` and checks it throws vitddp::Error whose message contains every one of `parts`.
::testing::AssertionResult throws_with(const std::function<void()>& body, const std::vector<std::string>& parts);

}  // namespace vitddp::testing
