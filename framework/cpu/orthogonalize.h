// Batched Gram-Schmidt: orthonormalises the columns of many small row-major matrices that lie
// back to back in one flat f32 buffer (PowerSGD's P matrices of one bucket), in one call.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/core/tensor.h"

namespace vitddp {

struct MatrixBatch {
  std::vector<int64_t> offsets;  // element offset of each (rows_k, cols) matrix in the buffer
  std::vector<int64_t> rows;
  int64_t cols = 0;
};

namespace cpu {
void orthogonalize_columns(const Tensor& flat, const MatrixBatch& batch, double eps = 1e-8);
}
namespace cuda {
// One thread block per matrix, up to 128 matrices per launch; the host never waits for the
// stream (the matrices' places travel as kernel arguments).
void orthogonalize_columns(const Tensor& flat, const MatrixBatch& batch, double eps = 1e-8);
}

}  // namespace vitddp
