#include "framework/cpu/orthogonalize.h"

#include <cmath>

namespace vitddp::cpu {

void orthogonalize_columns(const Tensor& flat, const MatrixBatch& batch, double eps) {
  check_tensor(flat.dtype() == DType::kF32 && flat.is_contiguous(), "orthogonalize", "a contiguous f32 buffer", flat);
  float* base = flat.data<float>();
  const int64_t c = batch.cols;
  for (size_t k = 0; k < batch.offsets.size(); ++k) {
    float* m = base + batch.offsets[k];  // (rows, c)
    const int64_t n = batch.rows[k];
    for (int64_t i = 0; i < c; ++i) {
      for (int64_t j = 0; j < i; ++j) {
        double dot = 0;
        for (int64_t r = 0; r < n; ++r) dot += double(m[r * c + i]) * m[r * c + j];
        for (int64_t r = 0; r < n; ++r) m[r * c + i] -= static_cast<float>(dot) * m[r * c + j];
      }
      double norm = 0;
      for (int64_t r = 0; r < n; ++r) norm += double(m[r * c + i]) * m[r * c + i];
      const float inv = static_cast<float>(1.0 / (std::sqrt(norm) + eps));
      for (int64_t r = 0; r < n; ++r) m[r * c + i] *= inv;
    }
  }
}

}  // namespace vitddp::cpu
