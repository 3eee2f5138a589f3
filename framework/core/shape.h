// Shapes and strides: plain int64 vectors with checked helpers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vitddp {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& shape);  // "[2, 3, 4]"
// Number of elements; throws if a dim is negative or the product overflows.
int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
// Normalises a possibly negative dim against rank; throws naming `op` when out of range.
int64_t wrap_dim(int64_t dim, int64_t rank, const char* op);
// Numpy broadcasting of two shapes; throws naming `op` and both shapes when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace vitddp
