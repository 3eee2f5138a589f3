#include "framework/core/shape.h"

#include <limits>
#include <sstream>

#include "framework/core/error.h"

namespace vitddp {

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    VITDDP_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
    VITDDP_CHECK(d == 0 || n <= std::numeric_limits<int64_t>::max() / d, "shape ", shape_str(shape),
                 " has too many elements");
    n *= d;
  }
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * std::max<int64_t>(shape[i + 1], 1);
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t rank, const char* op) {
  int64_t wrapped = dim < 0 ? dim + rank : dim;
  VITDDP_CHECK(wrapped >= 0 && wrapped < rank, op, ": dim ", dim, " out of range for a tensor of rank ", rank);
  return wrapped;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    VITDDP_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
                 " cannot be broadcast together");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace vitddp
