// Differentiable views and layout changes. Views share storage with their input; the results
// of permute/transpose/select/slice/expand may be non-contiguous, and every op accepts that.
#pragma once

#include <vector>

#include "framework/core/tensor.h"

namespace vitddp {

// One dim may be -1 (inferred). Views when the input is contiguous, copies otherwise.
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
// Broadcasts size-1 dims (and new leading dims) to `shape` without copying; -1 keeps a dim.
Tensor expand(const Tensor& x, const Shape& shape);
// Concatenates along `dim`; all other dims, dtypes and devices must match.
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);
// Removes `dim`, taking entry `index` (negative counts from the end). Backward scatters the
// gradient into zeros of x's shape (likewise slice).
Tensor select(const Tensor& x, int64_t dim, int64_t index);
// Entries [start, end) of `dim` (end clamped to the size; negative start/end count from the
// end, as in Python; start == end gives an empty view).
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end);
// Differentiable contiguous copy (identity in backward); returns `x` itself when already contiguous.
Tensor contiguous(const Tensor& x);

}  // namespace vitddp
